#!/usr/bin/env node
// Starts the embedded Cosmos DB endpoint (@vercel/cosmosdb-server) with connections kept alive.
// Its own CLI answers every request with "Connection: close", so each request of the SDK paid a
// new TCP connection and TLS handshake on both sides (about half the client's time on the hub's
// read path). Real Cosmos DB keeps connections alive.
// Usage: node embedded_cosmos.js <path of the package's lib/index.js> <port> <host>
"use strict";

const [modulePath, port, host] = process.argv.slice(2);
const { createHttpsServer } = require(modulePath);

const server = createHttpsServer({ keepAlive: true });
// Longer than aiohttp's idle keep-alive (15 s), so the client, not the server, closes an idle
// connection and never sends a request on one the server is closing.
server.keepAliveTimeout = 65000;
server.headersTimeout = 66000;
server.listen(parseInt(port, 10), host, () => {
  console.log(`Ready to accept HTTPS connections at ${host}:${port} (keep-alive)`);
});
