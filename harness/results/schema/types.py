"""The building blocks of the bundle records: a record base class and field types that carry their meaning.

Every field of every record is declared with a description (what it is, its unit, when it is null); the JSON
Schema that xmfu publishes and the field tables of docs/bundle.md are generated from these declarations
(schema/generate.py), so the documentation cannot drift from what is written and validated.

msgspec (https://jcristharif.com/msgspec/) holds the records: a Struct is a typed record with
`forbid_unknown_fields`, `msgspec.json.schema` generates JSON Schema 2020-12 from it, and decoding a line
with `type=` validates it in C (about a microsecond per row), which a 4,000-row compare needs; it is one wheel
with no dependencies, which an offline node can carry.
"""

from typing import Annotated, Any

import msgspec
from msgspec import Meta


class Record(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A record of the bundle: every key declared; a key it does not declare is refused."""


class OpenRecord(msgspec.Struct, kw_only=True):
    """A record whose declared keys are checked and whose other keys are kept: what a vendor library reports
    (NVML, amdsmi, the OS) can grow a key on a machine xmfu has not met, and a run must not fail for it."""


def doc(kind: Any, description: str, **constraints: Any) -> Any:
    """`kind` with its description (and constraints such as ge=0) for the schema."""
    return Annotated[kind, Meta(description=description, **constraints)]


def maybe(kind: Any, description: str, **constraints: Any) -> Any:
    """`kind` or null; constraints apply to the value when it is not null."""
    inner = Annotated[kind, Meta(**constraints)] if constraints else kind
    return Annotated[inner | None, Meta(description=description)]


NonNeg = Annotated[float, Meta(ge=0)]
Positive = Annotated[float, Meta(gt=0)]
Text = Annotated[str, Meta(min_length=1)]
# A run id names a folder of results_dir and a file of the history store: a plain name, never a path.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
RunId = Annotated[str, Meta(pattern=RUN_ID_PATTERN, description="the run's id: a plain folder name, never a path")]
AnyMap = dict[str, Any]
