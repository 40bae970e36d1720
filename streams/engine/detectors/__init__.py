"""Detectors, one per module over the contract in ``base``: step-time drift, stragglers (arrival lateness
at collectives), critical-path shifts, partial synchronisation loss, restart re-runs, serving (tail-latency
inflation, retry storms), control coherence (conflicting controllers, energy feedback loops)."""
