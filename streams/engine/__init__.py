"""The pure engine: graph state, detectors, economics and attribution.

Nothing here imports Faust, Kafka or DuckDB, and nothing reads the wall clock: the same engine runs live
(Faust agents), over a historical topic range (replay) and over files, and gives the same records.
"""
