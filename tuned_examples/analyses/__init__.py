"""Analyses of trained policies: the tables and plots beyond an example's own before/after score (length
generalisation, the papers' comparison tables), written to runs/ and copied to tuned_examples/results/."""
