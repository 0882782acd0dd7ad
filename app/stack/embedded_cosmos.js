#!/usr/bin/env node
// Starts the embedded Cosmos DB endpoint (@vercel/cosmosdb-server) with connections kept alive.
// Its own CLI answers every request with "Connection: close", so each request of the SDK paid a
// new TCP connection and TLS handshake on both sides (about half the client's time on the hub's
// read path). Real Cosmos DB keeps connections alive.
//
// It listens on plain HTTP, on the loopback interface only: TLS on every request cost about a
// tenth of a hub worker's CPU and of the endpoint's own, for a connection that never leaves the
// machine.
//
// It also answers the change feed as Cosmos DB does (the package answers every feed request with
// all documents once, then 304 forever): each write stamps the collection's next logical sequence
// number (_lsn) on the document, a feed request (header A-IM: Incremental feed) returns the
// documents changed after the LSN in If-None-Match (all of them without it, none for "*"), oldest
// change first, at most x-ms-max-item-count, with the last LSN as the etag, and 304 when nothing
// changed. Like Cosmos DB's latest-version mode, a document appears once, at its latest version,
// and deletes do not appear.
//
// A query sent with a partition key is evaluated over that partition's documents only, as Cosmos
// DB does. The package evaluates every query over the whole collection, at a cost that grows
// faster than the collection (28 ms of CPU per query in a collection of 3,000 documents, against
// 0.3 ms for a point read), so a query cost by the size of everything else stored beside it.
// Usage: node embedded_cosmos.js <path of the package's lib/index.js> <port> <host>
"use strict";

const path = require("path");
const { AsyncLocalStorage } = require("async_hooks");

const [modulePath, port, host] = process.argv.slice(2);
if (!["127.0.0.1", "::1", "localhost"].includes(host)) {
  console.error(`embedded_cosmos.js serves plain HTTP on loopback only, not on ${host}`);
  process.exit(2);
}
const { createHttpServer } = require(modulePath);
const Items = require(path.join(path.dirname(modulePath), "account", "items")).default;
const Account = require(path.join(path.dirname(modulePath), "account")).default;

// The server listens on plain HTTP (loopback only); the account it describes names https
// locations, which the SDK would then connect to. It names the address clients really use.
const readAccount = Account.prototype.read;
Account.prototype.read = function () {
  const account = readAccount.call(this);
  for (const location of [...account.writableLocations, ...account.readableLocations]) {
    location.databaseAccountEndpoint = location.databaseAccountEndpoint.replace(/^https:/, "http:");
  }
  return account;
};

const feedRequest = new AsyncLocalStorage();
const queryPartition = new AsyncLocalStorage();

// Each collection keeps the rids of every partition, built on the first scoped query and then
// kept up to date by every write and delete, so a scoped query costs the partition's size, not
// the collection's (a scan of 200,000 events to find one drawer's took ~10 ms of the endpoint's
// CPU, and the hub's peeks run one per drawer).
function partitionIndex(items) {
  if (items._ridsByPartition === undefined) {
    const index = new Map();
    for (const [rid, item] of items._data) addRid(index, items._getPartition(item.read()), rid);
    items._ridsByPartition = index;
  }
  return items._ridsByPartition;
}

function addRid(index, key, rid) {
  let rids = index.get(key);
  if (rids === undefined) index.set(key, (rids = new Set()));
  rids.add(rid);
}

const setItem = Items.prototype._set;
Items.prototype._set = function (data) {
  const written = setItem.call(this, data);
  if (this._ridsByPartition !== undefined) addRid(this._ridsByPartition, this._getPartition(written), written._rid);
  return written;
};

const deleteItem = Items.prototype.delete;
Items.prototype.delete = function (idOrRid, partition) {
  const old = this._item("/id", idOrRid, partition).read();
  const result = deleteItem.call(this, idOrRid, partition); // throws when there is none
  if (this._ridsByPartition === undefined) return result;
  const oldPartition = this._getPartition(old);
  const rids = this._ridsByPartition.get(oldPartition);
  if (rids !== undefined) {
    rids.delete(old._rid);
    if (rids.size === 0) this._ridsByPartition.delete(oldPartition);
  }
  return result;
};

const queryAll = Items.prototype.query;
Items.prototype.query = function (params, options) {
  const scope = queryPartition.getStore();
  if (!scope) return queryAll.call(this, params, options);
  const everything = this._data;
  const inPartition = new Map();
  for (const rid of partitionIndex(this).get(scope.key) || []) inPartition.set(rid, everything.get(rid));
  this._data = inPartition; // the query runs synchronously: nothing else sees the narrowed map
  try {
    return queryAll.call(this, params, options);
  } finally {
    this._data = everything;
  }
};

function partitionOf(req) {
  if (req.method !== "POST" || !/query/i.test(req.headers["content-type"] || "")) return null;
  const header = req.headers["x-ms-documentdb-partitionkey"];
  if (!header) return null;
  try {
    const values = JSON.parse(header);
    return Array.isArray(values) && values.length === 1 ? { key: values[0] } : null;
  } catch {
    return null;
  }
}

const stampLsn = Items.prototype._set;
Items.prototype._set = function (data) {
  this._lastLsn = (this._lastLsn || 0) + 1;
  return stampLsn.call(this, { ...data, _lsn: this._lastLsn });
};

const readAll = Items.prototype.read;
Items.prototype.read = function (options = {}) {
  const feed = feedRequest.getStore();
  if (!feed) return readAll.call(this, options);
  if (!this._parent.read()) return null;
  const last = this._lastLsn || 0;
  const after = feed.since === "*" ? last : feed.since;
  const changed = [...this._data.values()]
    .map((item) => item.read())
    .filter((doc) => doc._lsn > after && doc._ts >= feed.modifiedSinceS)
    .sort((a, b) => a._lsn - b._lsn);
  const page = options.maxItemCount > 0 ? changed.slice(0, options.maxItemCount) : changed;
  feed.count = page.length;
  feed.etag = page.length ? page[page.length - 1]._lsn : after;
  return { result: page };
};

function changeFeed(req) {
  if (req.method !== "GET" || !/incremental feed/i.test(req.headers["a-im"] || "")) return null;
  const match = (req.headers["if-none-match"] || "").replace(/"/g, "");
  delete req.headers["if-none-match"]; // the package's own 304 logic must not see it
  const since = match === "*" ? "*" : Number.parseInt(match || "0", 10) || 0;
  const modified = Date.parse(req.headers["if-modified-since"] || "");
  return { since, modifiedSinceS: Number.isNaN(modified) ? 0 : Math.floor(modified / 1000), count: 0, etag: 0 };
}

function answerFeed(feed, res) {
  const setHeader = res.setHeader.bind(res);
  res.setHeader = (name, value) =>
    setHeader(name, name.toLowerCase() === "etag" ? `"${feed.etag}"` : value);
  const end = res.end.bind(res);
  res.end = (body, ...rest) => {
    if (res.statusCode === 200 && feed.count === 0) {
      res.statusCode = 304;
      return end(undefined, ...rest.filter((arg) => typeof arg === "function"));
    }
    return end(body, ...rest);
  };
}

const server = createHttpServer({ keepAlive: true });
const [handle] = server.listeners("request");
server.removeAllListeners("request");
server.on("request", (req, res) => {
  const partition = partitionOf(req);
  if (partition) return queryPartition.run(partition, () => handle(req, res));
  const feed = changeFeed(req);
  if (!feed) return handle(req, res);
  answerFeed(feed, res);
  return feedRequest.run(feed, () => handle(req, res));
});
// Longer than aiohttp's idle keep-alive (15 s), so the client, not the server, closes an idle
// connection and never sends a request on one the server is closing.
server.keepAliveTimeout = 65000;
server.headersTimeout = 66000;
server.listen(parseInt(port, 10), host, () => {
  console.log(`Ready to accept HTTP connections at ${host}:${port} (keep-alive)`);
});
