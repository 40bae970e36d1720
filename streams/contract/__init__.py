"""The event contract: what producers put on the telemetry and decisions topics, and how it is checked."""
