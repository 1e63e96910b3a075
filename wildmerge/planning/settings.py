"""How a run's subsets are drawn, as one typed record: what ``manifest.json`` keeps under ``sampling``.

A rerun on the same run folder must ask for the same draw (same pool references, seed, sizes, k ...), else it is
refused; the record's JSON is key for key what runs written before this model held, so they still compare equal.
"""

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, field_validator


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: str
    seed: int = 0
    sizes: List[int]  # sorted, each once; n = N is added when ``full``
    k: int
    full: bool = True
    mode: Literal["random", "homogeneous", "predicted"] = "random"
    expert_refs: List[List[Optional[str]]]  # [name, model, revision] per expert, pool order
    base_ref: List[Optional[str]]  # [model, revision]
    select: Optional[Dict[str, Any]] = None  # mode predicted: the predictor file, its hash and how it scores

    @field_validator("sizes")
    @classmethod
    def _sorted_once(cls, v):
        return sorted(set(v))

    @classmethod
    def of(cls, pool, *, sizes, k: int, seed: int = 0, full: bool = True, homogeneous: bool = False,
           select: Optional[dict] = None) -> "Sampling":
        """The draw of ``pool`` (a loaded ``Pool``); ``select`` (how a predictor chose the subsets) sets mode
        ``predicted``."""
        return cls(pool=pool.name, seed=seed, sizes=list(sizes), k=k, full=full,
                   mode="predicted" if select else "homogeneous" if homogeneous else "random",
                   expert_refs=[[e.label, e.model, e.revision] for e in pool.experts],
                   base_ref=[pool.base.model, pool.base.revision], select=select)

    @property
    def homogeneous(self) -> bool:
        return self.mode == "homogeneous"

    def record(self) -> dict:
        """The manifest's ``sampling`` record (``select`` only when subsets were chosen by a predictor)."""
        return self.model_dump(exclude={"select"} if self.select is None else set())

    def differences(self, recorded: dict) -> List[str]:
        """How a run's recorded draw differs from this one, one line per setting."""
        return [f"{k}: run has {recorded.get(k)!r}, this command asks for {v!r}"
                for k, v in self.record().items() if recorded.get(k) != v]
