"""Scenario simulator with ground truth (``driftlog simulate``): labelled telemetry and decisions."""
