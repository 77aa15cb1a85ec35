"""Errors of replies: MongoDB's names of error codes, and an error's name from what a reply gives."""

from __future__ import annotations

#: MongoDB's names of the error codes commonly met on the wire (from the server's error_codes.yml),
#: for replies that give a code without its codeName (writeErrors, servers before 3.4).
ERROR_NAMES = {
    1: "InternalError", 2: "BadValue", 4: "NoSuchKey", 6: "HostUnreachable", 7: "HostNotFound", 8: "UnknownError",
    9: "FailedToParse", 11: "UserNotFound", 13: "Unauthorized", 14: "TypeMismatch", 15: "Overflow",
    16: "InvalidLength", 17: "ProtocolError", 18: "AuthenticationFailed", 20: "IllegalOperation",
    22: "InvalidBSON", 24: "LockTimeout", 26: "NamespaceNotFound", 27: "IndexNotFound", 43: "CursorNotFound",
    46: "LockBusy", 48: "NamespaceExists", 50: "MaxTimeMSExpired", 52: "DollarPrefixedFieldName",
    59: "CommandNotFound", 61: "ShardKeyNotFound", 64: "WriteConcernTimeout", 66: "ImmutableField",
    67: "CannotCreateIndex", 68: "IndexAlreadyExists", 72: "InvalidOptions", 73: "InvalidNamespace",
    76: "NoReplicationEnabled", 79: "UnknownReplWriteConcern", 85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict", 89: "NetworkTimeout", 91: "ShutdownInProgress", 96: "OperationFailed",
    100: "UnsatisfiableWriteConcern", 112: "WriteConflict", 115: "CommandNotSupported",
    117: "ConflictingOperationInProgress", 121: "DocumentValidationFailure", 125: "CommandFailed",
    133: "FailedToSatisfyReadPreference", 134: "ReadConcernMajorityNotAvailableYet", 136: "CappedPositionLost",
    146: "ExceededMemoryLimit", 150: "StaleEpoch", 175: "QueryPlanKilled", 189: "PrimarySteppedDown",
    202: "NetworkInterfaceExceededTimeLimit", 206: "NoSuchSession", 211: "KeyNotFound", 225: "TransactionTooOld",
    237: "CursorKilled", 244: "NOT_YET_AVAILABLE_TransactionAborted", 246: "SnapshotUnavailable",
    251: "NoSuchTransaction", 256: "TransactionCommitted", 257: "TransactionTooLarge",
    261: "TooManyLogicalSessions", 262: "ExceededTimeLimit", 263: "OperationNotSupportedInTransaction",
    279: "ClientDisconnect", 292: "QueryExceededMemoryLimitNoDiskUseAllowed", 9001: "SocketException",
    10107: "NotWritablePrimary", 10334: "BSONObjectTooLarge", 11000: "DuplicateKey", 11600: "InterruptedAtShutdown",
    11601: "Interrupted", 11602: "InterruptedDueToReplStateChange", 13388: "StaleConfig",
    13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary", 14031: "OutOfDiskSpace",
}


def _error_name(code, code_name, message) -> str:
    """An error's name: its codeName, else MongoDB's name for its code, else its message."""
    if isinstance(code_name, str) and code_name:
        return code_name
    if isinstance(code, int) and code in ERROR_NAMES:
        return ERROR_NAMES[code]
    if isinstance(message, str) and message:
        return message[:200]
    return f"code {code}" if isinstance(code, int) else "error"
