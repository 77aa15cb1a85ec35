"""message_class_of: a message class by Kafka's name, checked to be of the kind the caller needs."""

import pytest

from kwire.protocol.message_base import Data, Request, Response, message_class_of, request_class, response_class
from kwire.protocol.messages import FetchRequest, FetchResponse, OffsetCommitValue


def test_gives_the_class_when_it_is_of_the_kind():
    assert message_class_of("FetchRequest", Request) is FetchRequest
    assert message_class_of("OffsetCommitValue", Data) is OffsetCommitValue
    assert request_class(FetchRequest.API_KEY) is FetchRequest
    assert response_class(FetchRequest.API_KEY) is FetchResponse


def test_refuses_a_class_of_another_kind_naming_it():
    with pytest.raises(TypeError, match="FetchResponse is not a Request"):
        message_class_of("FetchResponse", Request)
    with pytest.raises(TypeError, match="OffsetCommitValue is not a Response"):
        message_class_of("OffsetCommitValue", Response)


def test_an_unknown_name_is_a_key_error():
    with pytest.raises(KeyError, match="NoSuchRequest"):
        message_class_of("NoSuchRequest", Request)
