"""Detectors, one per module over the contract in ``base``: step-time drift (a job's step series),
stragglers (arrival lateness at collectives), critical-path shifts (the composition of each step's
critical path)."""
