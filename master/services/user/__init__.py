"""Users and their login sessions."""
