"""Row decoding lives in ``runstore._sql._decode`` (shared by both backends)."""

from .._sql._decode import acknowledgement_json as acknowledgement_json
from .._sql._decode import decode_acknowledgement as decode_acknowledgement
from .._sql._decode import decode_change as decode_change
from .._sql._decode import decode_fact as decode_fact
from .._sql._decode import decode_run as decode_run
from .._sql._decode import raw_fact as raw_fact
from .._sql._decode import raw_run as raw_run
