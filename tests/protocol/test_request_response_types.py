"""Each generated request class names its response class as Request's type parameter (what types a
client's ``send``): the one ``response_class`` gives for its api key."""

import typing

from kwire.protocol.generated.api_keys import API_INFO
from kwire.protocol.message_base import Request, request_class, response_class


def _named_response(cls: type) -> str:
    [base] = [b for b in cls.__orig_bases__ if typing.get_origin(b) is Request]
    [arg] = typing.get_args(base)
    return arg.__forward_arg__ if isinstance(arg, typing.ForwardRef) else arg.__name__


def test_every_request_names_its_response():
    assert len(API_INFO) > 80
    for key in API_INFO:
        assert _named_response(request_class(key)) == response_class(key).__name__, key


def test_a_request_is_still_an_instance_of_request():
    cls = request_class(0)
    assert issubclass(cls, Request) and isinstance(cls(), Request)
