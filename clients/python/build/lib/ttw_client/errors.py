"""The service's refusals as exceptions: one class per stable error code
(``ttw_client.errors.NotFound`` for ``not_found``), each a subclass of
:class:`ApiError`; and :class:`ConnectionFailed` when no answer came."""

from typing import Dict, Type

from ._generated import CODES


class TtwError(Exception):
    """Anything this client raises."""


class ConnectionFailed(TtwError):
    """No answer from the service after every retry (refused, reset, timed out)."""


class ApiError(TtwError):
    """The service refused: its HTTP status, stable code and message."""

    code = ""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _class_name(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


#: The exception class of each code.
BY_CODE: Dict[str, Type[ApiError]] = {}
for _code in CODES:
    _cls = type(_class_name(_code), (ApiError,), {"code": _code, "__doc__": f"The service answered `{_code}`."})
    BY_CODE[_code] = _cls
    globals()[_cls.__name__] = _cls


def error_for(status: int, code: str, message: str) -> ApiError:
    """The exception of ``code``, or a plain :class:`ApiError` for a code this
    version does not know."""
    return BY_CODE.get(code, ApiError)(status, code, message)
