"""Load shapes: a list of stages (users, spawn rate, how long to hold).

The default is the stepped shape users run by hand today (``domain.md``): 10 users for
30 s as warm-up, then +2 users/s up to 20 and hold, then steps of 20 users (40, 60, ...)
up to ``max_users``, holding each about 30 s. A YAML or JSON file can define another::

    stages:
      - {name: warmup, users: 10, spawn_rate: 10, duration_s: 30}
      - {users: 50, spawn_rate: 5, duration_s: 60}

:meth:`LoadShape.scaled` multiplies every duration by one factor, so tests and
``--duration`` run the same shape shorter. Pure data: nothing here imports locust.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.bench.datafile import parse_yaml
from mmelocal.errors import UserInputError

#: Locust's shape worker re-reads the shape once a second, so shorter stages would be skipped.
MIN_STAGE_DURATION_S = 1.0
#: the name of the stepped shape's first stage; summaries of the published procedure leave
#: it out (they keep the steps of 20, 40, ... users)
WARMUP_STAGE_NAME = "warmup"


@dataclass(frozen=True, kw_only=True)
class Stage:
    """Hold ``users`` concurrent users (reached at ``spawn_rate`` users/s) for ``duration_s``."""

    users: int
    spawn_rate: float
    duration_s: float
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.users, int) or self.users < 1:
            raise UserInputError(f"stage users must be an int >= 1, got {self.users!r}")
        if self.spawn_rate <= 0:
            raise UserInputError(f"stage spawn_rate must be > 0 users/s, got {self.spawn_rate}")
        if self.duration_s < MIN_STAGE_DURATION_S:
            raise UserInputError(
                f"stage duration_s must be >= {MIN_STAGE_DURATION_S} s (locust adjusts users "
                f"once a second), got {self.duration_s}"
            )
        if not self.name:
            object.__setattr__(self, "name", f"{self.users} users")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the shape-file format)."""
        return {
            "name": self.name,
            "users": self.users,
            "spawn_rate": self.spawn_rate,
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True, kw_only=True)
class LoadShape:
    """An ordered tuple of stages run one after the other."""

    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise UserInputError("a load shape needs at least one stage")

    @property
    def duration_s(self) -> float:
        """Total planned duration."""
        return sum(stage.duration_s for stage in self.stages)

    @property
    def max_users(self) -> int:
        """The largest user count of any stage."""
        return max(stage.users for stage in self.stages)

    def boundaries_s(self) -> list[float]:
        """End time of each stage, measured from the start of the test."""
        ends: list[float] = []
        elapsed = 0.0
        for stage in self.stages:
            elapsed += stage.duration_s
            ends.append(elapsed)
        return ends

    def ramp_s(self, index: int) -> float:
        """Planned seconds stage ``index`` spends reaching its users from the previous stage's
        (from 0 for the first) at its spawn rate, at most the stage's duration."""
        stage = self.stages[index]
        before = self.stages[index - 1].users if index > 0 else 0
        return min(abs(stage.users - before) / stage.spawn_rate, stage.duration_s)

    def stage_at(self, run_time_s: float) -> int | None:
        """Index of the stage planned at ``run_time_s``; None once the shape is over."""
        for index, end in enumerate(self.boundaries_s()):
            if run_time_s < end:
                return index
        return None

    def scaled(self, factor: float) -> LoadShape:
        """The same shape with every duration multiplied by ``factor`` (spawn rates too, so
        ramps keep their share of each stage); durations never go below one second."""
        if factor <= 0:
            raise UserInputError(f"time scale factor must be > 0, got {factor}")
        return LoadShape(
            stages=tuple(
                Stage(
                    name=stage.name,
                    users=stage.users,
                    spawn_rate=stage.spawn_rate / min(factor, 1.0),
                    duration_s=max(MIN_STAGE_DURATION_S, stage.duration_s * factor),
                )
                for stage in self.stages
            )
        )

    def fitted(self, duration_s: float) -> LoadShape:
        """The same shape scaled to last about ``duration_s`` in total."""
        if duration_s <= 0:
            raise UserInputError(f"duration must be > 0 s, got {duration_s}")
        return self.scaled(duration_s / self.duration_s)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the shape-file format)."""
        return {"stages": [stage.to_dict() for stage in self.stages]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, origin: str = "<shape>") -> LoadShape:
        """Build from the shape-file format (errors name the origin and the stage)."""
        raw = data.get("stages") if isinstance(data, Mapping) else None
        if not isinstance(raw, list):
            raise UserInputError(f"{origin}: expected a mapping with a 'stages:' list")
        stages: list[Stage] = []
        for index, entry in enumerate(raw):
            if not isinstance(entry, Mapping):
                raise UserInputError(f"{origin}: stages[{index}] must be a mapping")
            unknown = set(entry) - {"name", "users", "spawn_rate", "duration_s"}
            if unknown:
                raise UserInputError(
                    f"{origin}: stages[{index}] has unknown field(s) {sorted(unknown)}; "
                    "allowed: name, users, spawn_rate, duration_s"
                )
            try:
                users = int(entry["users"])
                duration_s = float(entry["duration_s"])
                spawn_rate = float(entry.get("spawn_rate", users))
            except KeyError as exc:
                raise UserInputError(f"{origin}: stages[{index}] needs {exc.args[0]!r}") from exc
            except (TypeError, ValueError) as exc:
                raise UserInputError(f"{origin}: stages[{index}]: {exc}") from exc
            try:
                stages.append(
                    Stage(
                        name=str(entry.get("name", "")),
                        users=users,
                        spawn_rate=spawn_rate,
                        duration_s=duration_s,
                    )
                )
            except UserInputError as exc:
                raise UserInputError(f"{origin}: stages[{index}]: {exc}") from exc
        return cls(stages=tuple(stages))


def stepped_shape(
    *,
    max_users: int = 200,
    warmup_users: int = 10,
    warmup_s: float = 30.0,
    step_users: int = 20,
    step_s: float = 30.0,
    first_ramp_rate: float = 2.0,
    step_ramp_rate: float = 10.0,
) -> LoadShape:
    """The stepped shape of ``domain.md``: warm-up, +2 users/s to 20, then steps of 20."""
    if max_users < 1:
        raise UserInputError(f"max_users must be >= 1, got {max_users}")
    stages = [
        Stage(
            name=WARMUP_STAGE_NAME,
            users=min(warmup_users, max_users),
            spawn_rate=float(warmup_users),
            duration_s=warmup_s,
        )
    ]
    users = step_users
    rate = first_ramp_rate
    while users <= max_users:
        stages.append(Stage(users=users, spawn_rate=rate, duration_s=step_s))
        users += step_users
        rate = step_ramp_rate
    if stages[-1].users < max_users:
        stages.append(Stage(users=max_users, spawn_rate=rate, duration_s=step_s))
    return LoadShape(stages=tuple(stages))


def load_shape(spec: str | Path | None, *, max_users: int = 200) -> LoadShape:
    """``None`` or ``"stages"`` -> :func:`stepped_shape`; otherwise a YAML/JSON file path."""
    if spec is None or str(spec) == "stages":
        return stepped_shape(max_users=max_users)
    path = Path(spec)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise UserInputError(
            f"--shape must be 'stages' or a YAML/JSON file; cannot read {path}: {exc.strerror}"
        ) from exc
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserInputError(f"{path}: not valid JSON: {exc}") from exc
    else:
        data = parse_yaml(text, origin=str(path))
    return LoadShape.from_dict(data, origin=str(path))


def shape_from_stages(stages: Sequence[Mapping[str, Any]]) -> LoadShape:
    """Convenience: a shape from a list of stage mappings."""
    return LoadShape.from_dict({"stages": list(stages)})


__all__ = [
    "MIN_STAGE_DURATION_S",
    "WARMUP_STAGE_NAME",
    "LoadShape",
    "Stage",
    "load_shape",
    "shape_from_stages",
    "stepped_shape",
]
