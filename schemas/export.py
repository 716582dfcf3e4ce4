"""Export JSON Schema files from the pydantic models (for other languages and for review).

``python -m rankscope.schemas.export`` (in a checkout) rewrites ``schemas/json``; a test fails when
the committed files drift from the models, so the JSON files can never silently disagree with the
code. ``rankscope schemas-export --out DIR`` writes them anywhere else, never into an installed
package unless asked to.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from rankscope.schemas.baselines import Baseline
from rankscope.schemas.derived import DeadLetter, Detection, Incident, LateEvent, RankWindow
from rankscope.schemas.events import MODEL_BY_SCHEMA

JSON_DIR = Path(__file__).parent / "json"


def schema_documents() -> dict[str, str]:
    """File name -> JSON text, for every event schema and derived record."""
    docs: dict[str, str] = {}
    models: dict[str, type[BaseModel]] = {
        sid.replace("/", ".v"): m for sid, m in MODEL_BY_SCHEMA.items()
    }
    models.update(
        {
            "deadletter.v1": DeadLetter,
            "rank_window.v1": RankWindow,
            "late_event.v1": LateEvent,
            "detection.v1": Detection,
            "incident.v1": Incident,
            "baseline.v1": Baseline,
        }
    )
    for name, model in sorted(models.items()):
        doc = model.model_json_schema(by_alias=True, mode="serialization")
        doc["$id"] = f"https://rankscope.dev/schemas/{name}.json"
        docs[f"{name}.json"] = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    return docs


def write_schemas(out: Path) -> int:
    """Write every schema document to ``out`` (removing stale ones); returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    docs = schema_documents()
    for stale in out.glob("*.json"):
        if stale.name not in docs:
            stale.unlink()
    for name, text in docs.items():
        (out / name).write_text(text)
    return len(docs)


def main(out: Path = JSON_DIR) -> int:
    count = write_schemas(out)
    print(f"wrote {count} schema files to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
