"""Never skip silently: the store's next offsets must be positions the audit topic can continue from.

The sink resumes each partition at the offset stored with its rows. When the topic was deleted and
created again (a wiped local broker, a recreated topic) or truncated, the stored offset may lie beyond the
topic's end: reading from there would skip every record below it (and a consumer that resets drops them
as re-deliveries). When the topic's start lies beyond the stored offset, records were deleted (retention)
before the sink stored them. A topic recreated with at least as many records as were stored is told by
its content: the record the topic now holds at each stored next offset - 1 must be the one stored there
(same timestamp, key and value). Either way the sink refuses to run and says which partitions and why.
"""

from __future__ import annotations

from collections.abc import Mapping

from audit.store import RawRecord
from streams.errors import OffsetsMismatch

TopicPartitionKey = tuple[str, int]

RECOVERY = (
    "if the topic was recreated on purpose, move the DuckDB file aside (keep it: it is the old trail) and "
    "start the sink on a new one; see README, 'When the audit topic was recreated'"
)


def check(
    stored: Mapping[TopicPartitionKey, int],
    beginning: Mapping[TopicPartitionKey, int],
    end: Mapping[TopicPartitionKey, int],
) -> OffsetsMismatch | None:
    """The mismatch between the store's next offsets and the topic's offsets, or None when every stored
    partition can be continued (partitions the store has nothing of are read from their beginning)."""
    beyond, deleted = [], []
    for tp in sorted(set(stored) & set(end)):
        nxt = stored[tp]
        if nxt > end[tp]:
            beyond.append(f"{tp[0]}/{tp[1]} stored next offset {nxt} > topic end {end[tp]}")
        elif nxt < beginning.get(tp, 0):
            deleted.append(f"{tp[0]}/{tp[1]} records {nxt}..{beginning[tp] - 1} were deleted before they were stored")
    if beyond:
        return OffsetsMismatch(
            "the audit topic ends before the offsets this DuckDB file already stored (was it recreated or "
            f"truncated?): {'; '.join(beyond[:4])}{' ...' if len(beyond) > 4 else ''}; nothing was skipped; {RECOVERY}"
        )
    if deleted:
        return OffsetsMismatch(
            f"the audit topic lost records the sink never stored (retention too short?): {'; '.join(deleted[:4])}"
            f"{' ...' if len(deleted) > 4 else ''}; raise the topic's retention, and {RECOVERY}"
        )
    return None


def compare_last(
    stored: Mapping[TopicPartitionKey, RawRecord], found: Mapping[TopicPartitionKey, RawRecord | None]
) -> OffsetsMismatch | None:
    """The partitions whose record at the stored last offset is not (or no longer) the one stored."""
    changed = []
    for tp, mine in sorted(stored.items()):
        if tp not in found:
            continue  # not checked (e.g. beyond the end: reported by check())
        theirs = found[tp]
        same = theirs is not None and (theirs.timestamp_ms, theirs.key, theirs.value) == (
            mine.timestamp_ms, mine.key, mine.value
        )  # fmt: skip
        if not same:
            changed.append(f"{tp[0]}/{tp[1]} offset {mine.offset}")
    if not changed:
        return None
    return OffsetsMismatch(
        "the audit topic no longer holds the records this DuckDB file stored (was it recreated?): the record at "
        f"{'; '.join(changed[:4])}{' ...' if len(changed) > 4 else ''} differs; nothing was skipped; {RECOVERY}"
    )
