// What the server shares with the client (connection ids, close codes, log levels) comes
// from the engine; whoever imports the server sees it too.
@_exported import WebSocketEngine
