"""`determined.common`: only the names Determined's examples import from it (`util`)."""
