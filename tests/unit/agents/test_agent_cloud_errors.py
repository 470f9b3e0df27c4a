"""Cloud API errors are classified the same way for every cloud, from the SDKs' own exception types."""

from __future__ import annotations

import azure.core.exceptions as azexc
import botocore.exceptions
import google.auth.exceptions
import pytest
from google.api_core import exceptions as gexc

from meridian.fleet import models

from agents.providers import aws, azure, gcp
from agents.providers.errors import CloudError, CloudErrorKind, classify_message

K = CloudErrorKind


def client_error(code: str, message: str = "m", status: int = 400) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize("code, status, kind", [
    ("Throttling", 400, K.THROTTLED), ("RequestLimitExceeded", 503, K.THROTTLED),
    ("InsufficientInstanceCapacity", 500, K.INSUFFICIENT_CAPACITY), ("VcpuLimitExceeded", 400, K.QUOTA_EXCEEDED),
    ("UnauthorizedOperation", 403, K.AUTH_FAILURE), ("InvalidClientTokenId", 403, K.AUTH_FAILURE),
    ("InternalError", 500, K.UNAVAILABLE), ("ValidationError", 400, K.NOT_FOUND),
])
def test_aws_client_errors(code, status, kind):
    """botocore ClientError codes map to kinds."""
    assert aws.classify(client_error(code, status=status), "op").kind == kind


def test_aws_non_client_errors():
    """Missing credentials are an auth failure; a dead endpoint is unavailable."""
    assert aws.classify(botocore.exceptions.NoCredentialsError()).kind == K.AUTH_FAILURE
    assert aws.classify(botocore.exceptions.EndpointConnectionError(endpoint_url="http://x")).kind == K.UNAVAILABLE


def test_aws_scaling_activities():
    """A failed launch for lack of capacity is a stock-out; a vCPU limit is a quota; success is no problem."""
    cap = aws.classify_activity({"StatusCode": "Failed", "StatusMessage": (
        "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested "
        "(us-east-1a). Launching EC2 instance failed.")})
    assert cap.kind == K.INSUFFICIENT_CAPACITY and cap.event_kind == models.EventKind.STOCK_OUT
    quota = aws.classify_activity({"StatusCode": "Failed", "StatusMessage": (
        "You have requested more vCPU capacity than your current vCPU limit of 96 allows (VcpuLimitExceeded).")})
    assert quota.kind == K.QUOTA_EXCEEDED
    assert aws.classify_activity({"StatusCode": "Successful"}) is None


@pytest.mark.parametrize("exc, kind", [
    (gexc.TooManyRequests("slow"), K.THROTTLED),
    (gexc.ResourceExhausted(
        "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service "
        "'container.googleapis.com'"), K.THROTTLED),
    (gexc.ResourceExhausted("Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 8.0 in region us-central1."), K.QUOTA_EXCEEDED),
    (gexc.ResourceExhausted("... does not have enough resources available ... ZONE_RESOURCE_POOL_EXHAUSTED"),
     K.INSUFFICIENT_CAPACITY),
    (gexc.PermissionDenied("Required 'container.nodePools.update' permission"), K.AUTH_FAILURE),
    (google.auth.exceptions.DefaultCredentialsError("no ADC"), K.AUTH_FAILURE),
    (gexc.NotFound("nope"), K.NOT_FOUND), (gexc.ServiceUnavailable("later"), K.UNAVAILABLE),
])
def test_gcp_exceptions(exc, kind):
    """google-api-core exceptions map to kinds; RESOURCE_EXHAUSTED is told apart by its message."""
    assert gcp.classify(exc).kind == kind


def test_gcp_operation_errors():
    """An operation's google.rpc.Status is classified by code and message."""
    assert gcp.classify_status(8, "ZONE_RESOURCE_POOL_EXHAUSTED").kind == K.INSUFFICIENT_CAPACITY
    assert gcp.classify_status(7, "caller does not have permission").kind == K.AUTH_FAILURE
    assert gcp.classify_status(8, "too many requests").kind == K.THROTTLED


class _Resp:
    def __init__(self, status: int, code: str):
        self.status_code = status
        self.headers = {"x-ms-error-code": code}
        self.reason = "r"

    def text(self):
        return ""


@pytest.mark.parametrize("status, code, message, kind", [
    (409, "OperationNotAllowed", "Operation could not be completed as it results in exceeding approved "
                                 "standardNCADSA100v4Family Cores quota.", K.QUOTA_EXCEEDED),
    (200, "AllocationFailed", "Allocation failed.", K.INSUFFICIENT_CAPACITY),
    (409, "ZonalAllocationFailed", "Allocation failed in zone 1.", K.INSUFFICIENT_CAPACITY),
    (429, "TooManyRequests", "slow down", K.THROTTLED),
    (403, "AuthorizationFailed", "no role", K.AUTH_FAILURE),
    (404, "ResourceNotFound", "gone", K.NOT_FOUND),
])
def test_azure_http_errors(status, code, message, kind):
    """ARM error codes (header or body) map to kinds; OperationNotAllowed is a quota only when it says so."""
    exc = azexc.HttpResponseError(message=message, response=_Resp(status, code))
    assert azure.classify(exc).kind == kind


def test_azure_client_auth_error():
    """A credential that cannot get a token is an auth failure."""
    assert azure.classify(azexc.ClientAuthenticationError("no token")).kind == K.AUTH_FAILURE


def test_message_rules_and_event_kinds():
    """Free-text classification and the event each kind raises (none for not-found)."""
    assert classify_message("Rate exceeded") == K.THROTTLED
    assert classify_message("all good") is None
    assert CloudError(K.QUOTA_EXCEEDED, "q").event_kind == models.EventKind.QUOTA_EXCEEDED
    assert CloudError(K.AUTH_FAILURE, "a").event_kind == models.EventKind.AUTH_FAILURE
    assert CloudError(K.NOT_FOUND, "n").event_kind is None
    assert "pool=p" in str(CloudError(K.THROTTLED, "x").with_pool("p", "resize"))
