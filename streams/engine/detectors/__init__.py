"""Detectors, one per module: step-time drift (a job's step series) and stragglers (arrival lateness at
collectives). Each keeps bounded state, uses event time only, and gives the same findings on a replay."""
