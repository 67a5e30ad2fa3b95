// What the client shares with the server (connection ids, close codes, log levels) comes
// from the engine; whoever imports the client sees it too.
@_exported import WebSocketEngine
