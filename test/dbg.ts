import { startService } from "/work/wt/test/support/service.js";
import { rawGrpc, grpc } from "/work/wt/test/support/grpc-client.js";
const svc = await startService("sqlite");
const raw = await rawGrpc(svc.url, "/foo.v1.Bar/Baz", Buffer.from([0, 0, 0, 0, 0]), {});
console.log(raw.headers, raw.trailers, raw.body.length, raw.rstCode);
const client = new grpc.Client(svc.url.replace("http://", ""), grpc.credentials.createInsecure());
const err = await new Promise<any>((resolve) => client.makeUnaryRequest("/entityversions.v1.EntityVersionsService/Nope", (x: Buffer) => x, (x: Buffer) => x, Buffer.alloc(0), (e) => resolve(e)));
console.log(err?.code, err?.details);
client.close(); await svc.close();
