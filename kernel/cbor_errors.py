"""The canonical-CBOR errors (spec/01): every refusal of the codec (`aos.kernel.cbor`, which
re-exports them) is one of these, each with its code.

Apart from the codec because the codec is compiled (spec/09 §5), and a compiled module's
classes keep no docstring, which the error catalogue (`aos errors`) reads.
"""

from __future__ import annotations

from aos.kernel.errors import AosError


class CborError(AosError):
    """Base of the canonical-CBOR errors."""

    code = "cbor.error"


class CborMalformedError(CborError):
    code = "cbor.malformed"
    hint = "the bytes are not well-formed CBOR"


class CborTruncatedError(CborError):
    code = "cbor.truncated"
    hint = "the input ends in the middle of a data item"


class CborTrailingBytesError(CborError):
    code = "cbor.trailing_bytes"
    hint = "one data item was expected; more bytes follow it"


class CborIndefiniteLengthError(CborError):
    code = "cbor.indefinite_length"
    hint = "aos accepts definite-length strings, arrays and maps only"


class CborDuplicateKeyError(CborError):
    code = "cbor.duplicate_key"
    hint = "a map names the same key twice"


class CborKeyTypeError(CborError):
    code = "cbor.key_type"
    hint = "map keys must be text strings or integers"


class CborUnknownTagError(CborError):
    code = "cbor.unknown_tag"
    hint = "values may not carry CBOR tags; only a leading self-describe tag 55799 is allowed"


class CborUnsupportedValueError(CborError):
    code = "cbor.unsupported_value"
    hint = "values are null, booleans, integers, floats, text, bytes, arrays and maps"


class CborIntegerRangeError(CborError):
    code = "cbor.integer_range"
    hint = "integers must fit CBOR major types 0/1: -2**64 .. 2**64-1"


class CborDepthError(CborError):
    code = "cbor.depth_exceeded"
    hint = "nesting is deeper than the configured limit"


class CborTooLargeError(CborError):
    code = "cbor.too_large"
    hint = "the input is larger than the configured limit"


class CborNonCanonicalError(CborError):
    code = "cbor.non_canonical"
    hint = "the bytes decode, but are not the canonical encoding of their value"
