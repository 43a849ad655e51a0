// Which RPC requests Connect may decompress, so run in the scope that
// charges what they inflate to: erring towards yes.
import { test } from "uvu";
import * as assert from "uvu/assert";
import { lowercaseEncodingNames, mayBeCompressed } from "../../src/rpc/encoding-names.js";

const post = (headers: Record<string, string>) => {
  const header = new Headers(headers);
  lowercaseEncodingNames(header);
  return mayBeCompressed("POST", header, "/entityversions.v1.EntityVersionsService/GetActiveVersion");
};
const get = (query: string) => mayBeCompressed("GET", new Headers(), `/entityversions.v1.EntityAccessService/GetEntityAccess?connect=v1&encoding=proto&message=CgE${query}`);

test("a POST naming a coding other than identity, in any of the three protocols' headers and any letter case, may be compressed", () => {
  for (const name of ["grpc-encoding", "content-encoding", "connect-content-encoding", "Grpc-Encoding"]) {
    for (const coding of ["gzip", "GZIP", "br", "deflate", "snappy", "", "identity, gzip"]) assert.ok(post({ [name]: coding }), `${name}: ${JSON.stringify(coding)}`);
  }
  assert.ok(post({ "grpc-encoding": "identity", "connect-content-encoding": "gzip" }), "any one naming a coding");
});

test("a POST naming no coding, or identity, is not; nor do the accept-encoding headers count", () => {
  assert.not.ok(post({}));
  for (const name of ["grpc-encoding", "content-encoding", "connect-content-encoding"]) {
    for (const coding of ["identity", "IDENTITY", " Identity "]) assert.not.ok(post({ [name]: coding }), `${name}: ${JSON.stringify(coding)}`);
  }
  assert.not.ok(post({ "grpc-accept-encoding": "gzip", "connect-accept-encoding": "gzip", "accept-encoding": "gzip, br" }));
});

test("a Connect GET may be compressed when its query names a compression other than identity; its headers do not count", () => {
  for (const query of ["&compression=gzip", "&compression=GZIP", "&compression=br", "&compression=", "&compression=identity&compression=gzip"]) assert.ok(get(query), query);
  for (const query of ["", "&compression=identity", "&compression=Identity"]) assert.not.ok(get(query), query);
  assert.not.ok(mayBeCompressed("GET", new Headers({ "content-encoding": "gzip" }), "/x?connect=v1&message=CgE"), "a GET's message is in its URL");
});

test.run();
