"""Accuracy benchmark zoo (issue 11, item 4): cases with exact truths, metric and runner.

See ``zoo.py`` for the cases and the choose/report split, ``metrics.py`` for
the integrated squared error and ``run.py`` for the command line.
"""
