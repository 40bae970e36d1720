"""Errors of the format readers."""

from __future__ import annotations

from streams.errors import DriftlogError


class FormatError(DriftlogError):
    """An input file or message is not in the format it claims, or is damaged: the message names the file and
    what is wrong; re-export it from its tool (e.g. ``prof.export_chrome_trace``) or leave it out."""
