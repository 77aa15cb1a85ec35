"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546): the store AlterClientQuotas writes, the rates
measured against it and the throttle times (KIP-219) that follow."""

from .manager import ClientQuotaManager, RequestMeter, user_of
from .rate import SampledRate, throttle_time_ms
from .store import Alteration, ClientQuotaStore, Entity, QuotaRequestError, entity_of, format_entity

__all__ = ["Alteration", "ClientQuotaManager", "ClientQuotaStore", "Entity", "QuotaRequestError", "RequestMeter",
           "SampledRate", "entity_of", "format_entity", "throttle_time_ms", "user_of"]
