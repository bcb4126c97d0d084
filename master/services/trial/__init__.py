"""Trials: exits and searcher reports, metrics, logs and the reads people make of them."""
