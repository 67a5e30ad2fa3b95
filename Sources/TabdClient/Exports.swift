// The values a client reads (Snapshot, TabState, Event, EventBatch, JSONValue, ErrorCode,
// TabInfo, TabUpdate, ...) are the Coordinator module's own, folded by the same functions
// the server uses: whoever imports TabdClient sees them.
@_exported import Coordinator
// Whom a TLS tabd's certificate must chain to (TabdClient.Options.tls, TabdAPI(tls:)).
@_exported import struct WebSocketsClient.TLSTrust
@_exported import struct WebSocketsClient.TLSTrustError
