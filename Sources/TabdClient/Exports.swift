// The values a client reads (Snapshot, TabState, Event, EventBatch, JSONValue, ErrorCode,
// TabInfo, TabUpdate, ...) are the TabdProtocol module's, folded by the same functions the
// server uses: whoever imports TabdClient sees them, and none of the server's actors.
@_exported import TabdProtocol
// Whom a TLS tabd's certificate must chain to (TabdClient.Options.tls, TabdAPI(tls:)).
@_exported import struct WebSocketsClient.TLSTrust
@_exported import struct WebSocketsClient.TLSTrustError
// The blocking HTTP/1.1 call TabdAPI makes (tabbench and tabd's webhooks use it too).
@_exported import struct WebSocketsClient.HTTPCall
