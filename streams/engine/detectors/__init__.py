"""Detectors, one per module, over the contract in :mod:`streams.engine.detectors.base`."""
