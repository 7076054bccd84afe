"""Python's cyclic garbage collector, set for RecTune's runs: paused around a batch computation, and
tuned for a process that loads torch, transformers and TRL.

Scoring a release builds millions of small objects (rows, parsed mentions, caches) that live until it
ends; each generation-2 pass of the collector walks all of them, which costs a third of a 30,000-answer
scoring run (``make bench-score``). The objects it makes hold no reference cycles worth collecting mid-run,
and whatever cyclic garbage there is goes at the next collection after the pause.

Loading the libraries builds about 500,000 objects that live as long as the process (modules, classes,
functions). At Python's default thresholds the collector walked them 1,300 times as they loaded, and
again at each ``gc.collect()`` the libraries call: 1.7 s of a 7 s one-step SFT run on 2 cores, 0.8 s of a
4 s evaluation (``make bench-startup``). :func:`tune_collection_for_a_run` takes that to about 0.4 s.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Allocations between young collections: Python's default is 700. Fewer young collections promote fewer
# objects, so the full ones (run when the old generation has grown by a quarter) come rarely too;
# the young garbage waiting meanwhile is a few megabytes at most. Beyond 10,000 the gain measured flat.
YOUNG_COLLECTION_EVERY = 10_000


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Run the block with automatic garbage collection off; nested pauses end with the outermost."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def tune_collection_for_a_run() -> None:
    """What the process holds now (the libraries a script loaded before its ``main``) is frozen, never walked
    by the collector again, and young collections come every :data:`YOUNG_COLLECTION_EVERY` allocations.
    Called by every entry script as it starts (:func:`rectune.core.cli.run`)."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])
