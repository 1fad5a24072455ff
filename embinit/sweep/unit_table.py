"""The sweep's units as its workers read them: fetched from Ray's object store once per worker process,
not once per Tune trial.

Tune's `with_parameters` fetches and unpickles each of its values at every call of the trainable, that
is for every Tune trial, and the trainable needs the whole list of units to pick its own by index. So
every Tune trial unpickled every unit: O(N) per trial, O(N²) per sweep (10,000 one-trial units are
2.2 MB and ~170 ms of CPU to unpickle, per trial; `bench/bench_unit_fetch.py`). A `UnitTable` pickles as
one object reference instead; a worker process fetches the list once, keeps it under the reference's id,
and hands each trial a copy of its unit (what the trial saw before: its own objects).

Where Ray is not initialized yet, or is reached as a Ray Client (`ray://`), the table pickles the list
itself, as before.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

_FETCHED: dict[str, list] = {}   # this process's units, by object id: one sweep's at a time


class UnitTable:
    def __init__(self, units: Sequence[Any]):
        import ray

        self._units: list | None = list(units)
        self._ref = None
        if ray.is_initialized() and not ray.util.client.ray.is_connected():
            self._ref = ray.put(self._units)

    @property
    def shared(self) -> bool:
        """True when workers fetch the units once per process (an object reference), not per trial."""
        return self._ref is not None

    def __len__(self) -> int:
        return len(self._list())

    def __getitem__(self, index: int):
        return copy.deepcopy(self._list()[index])

    def _list(self) -> list:
        if self._units is not None:
            return self._units
        key = self._ref.hex()
        if key not in _FETCHED:
            import ray

            units = ray.get(self._ref)
            _FETCHED.clear()
            _FETCHED[key] = units
        return _FETCHED[key]

    def __getstate__(self) -> dict:
        return {"_ref": self._ref, "_units": self._units if self._ref is None else None}
