"""Readers for telemetry formats people already have: PyTorch profiler (Kineto) Chrome traces and
OpenTelemetry metrics. Each turns its input into envelopes of the event contract (docs/contract.md)."""
