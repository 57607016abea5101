"""Copying a whole store to another backend (a world made on LMDB moved to PostgreSQL).

Everything a world needs moves: journal records (re-encoded canonically, so byte for byte the
same), every CAS blob with its reclaim mark (a doomed mark writes its row again), every meta
key. The copy is one batch on the target, so it lands whole or not at all, and within the
target's batch limits (a new world's genesis is far below them); the target must be empty.
"""

from __future__ import annotations

from aos.kernel.store.errors import StoreUsageError
from aos.kernel.store.interface import Store


def copy_store(source: Store, target: Store) -> int:
    """Copy `source` into the empty `target` in one batch; the number of journal records."""
    if target.journal.head() != 0 or target.meta.keys() or next(target.cas.hashes(), None):
        raise StoreUsageError(f"the copy target {target.world_dir} is not empty")
    records = [record for _, record in source.journal.read()]
    with target.batch() as batch:
        if records:
            batch.journal_append(records)
        for content_hash in source.cas.hashes():
            batch.cas_put(source.cas.get(content_hash))
            mark = source.cas.mark(content_hash)
            if mark is not None:
                batch.cas_mark(content_hash, mark)
        keys = source.meta.keys()  # a list (Meta is not a mapping)
        for key in keys:
            batch.meta_put(key, source.meta.get(key))
    return len(records)
