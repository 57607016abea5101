"""What a world keeps in its store's meta besides the head and the snapshot list
(checkpointer.py): the format it was written in and its config (id, clock). Apart, with no
import, so that the light status read (status.py) reads them without the world's machinery.
"""

from __future__ import annotations

WORLD_FORMAT = 1
"""The format of the worlds this kernel writes; it opens no other."""
META_FORMAT = "world.format"
META_CONFIG = "world.config"
"""The world's id and clock, fixed at creation."""
