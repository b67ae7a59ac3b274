"""Runnable scripts, one per method; each runs on its CPU default with no arguments. Each example is its CPU config,
its paper preset and its expected score; the CPU tasks they share sit in tasks/, the recipes of the shipped
warm-starts in warm_starts/, and the analyses of trained policies in analyses/."""
