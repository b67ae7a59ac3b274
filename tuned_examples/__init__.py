"""Runnable scripts, one per method; each runs on its CPU default with no arguments."""
