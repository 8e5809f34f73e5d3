// Preloaded (`node --require`) into the npm MCP servers the tests run, because they cannot be told to bind
// 127.0.0.1: server-everything's HTTP transports call `app.listen(PORT)`, which binds every interface, and
// read no host from the environment or the command line. Every TCP listen is given the host 127.0.0.1
// instead (a Unix socket path is left alone); a server that still ends up elsewhere exits at once.
// Once listening, the real port is written to stderr as `loopback-only: listening on 127.0.0.1:PORT`, so
// a server started with PORT=0 takes a free port without a race.
"use strict";

const net = require("node:net");

const HOST = "127.0.0.1";
const listen = net.Server.prototype.listen;

function isPort(value) {
    return typeof value === "number" || (typeof value === "string" && /^\d+$/.test(value));
}

net.Server.prototype.listen = function (...args) {
    const first = args[0];
    if (first !== null && typeof first === "object") {
        if (first.path === undefined) {
            args[0] = { ...first, host: HOST };
        }
    } else if (isPort(first)) {
        if (typeof args[1] === "string") {
            args[1] = HOST;
        } else {
            args.splice(1, 0, HOST);
        }
    } else if (first === undefined || typeof first === "function") {
        args.splice(0, first === undefined ? 1 : 0, 0, HOST);
    }
    this.once("listening", () => {
        const address = this.address();
        if (address === null || typeof address === "string") {
            return;
        }
        if (address.address !== HOST) {
            process.stderr.write(`loopback-only: a server bound ${address.address}:${address.port}; exiting\n`);
            process.exit(70);
        }
        process.stderr.write(`loopback-only: listening on ${HOST}:${address.port}\n`);
    });
    return listen.apply(this, args);
};
