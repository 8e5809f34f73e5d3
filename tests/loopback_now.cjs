// Preloaded (`node --require`) into the MCP conformance suite the tests run. Its scenarios start servers
// with `app.listen(0)` (every interface) and read `server.address().port` on the next line, so the
// address must be bound before `listen` returns: tests/loopback_only.cjs's host lookup binds later.
// Here a TCP listen on a port with no host binds 127.0.0.1 at once (net.Server's own `_listen2`);
// every other listen is refused, so nothing binds beyond 127.0.0.1.
"use strict";

const net = require("node:net");

net.Server.prototype.listen = function (...args) {
    const port = args[0];
    const rest = args.slice(1);
    const callback = typeof rest[rest.length - 1] === "function" ? rest.pop() : undefined;
    if (typeof port !== "number" || rest.length > 0) {
        throw new Error(`loopback-now: refused listen(${args.map(String).join(", ")}); only listen(PORT)`);
    }
    if (callback !== undefined) {
        this.once("listening", callback);
    }
    this._listen2("127.0.0.1", port, 4, 511);
    return this;
};
