import { create, createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { EntityVersionsService, file_entityversions_v1_entity_versions } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { ServerReflectionRequestSchema } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflectionRequestSchema as RequestV1alphaSchema } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { ReflectionService } from "../../src/ops/reflection-service.js";

const service = new ReflectionService([EntityVersionsService.typeName], [file_entityversions_v1_entity_versions]);

async function* twice<T>(request: T): AsyncGenerator<T> {
  yield request;
  yield request;
}

/** The descriptors of each answer, and each answer's size on the wire. */
async function answers(stream: AsyncIterable<{ messageResponse: { case: string | undefined; value?: unknown } }>) {
  const out: Array<{ files: Uint8Array[]; bytes: number }> = [];
  for await (const res of stream) {
    assert.is(res.messageResponse.case, "fileDescriptorResponse");
    const files = (res.messageResponse.value as { fileDescriptorProto: Uint8Array[] }).fileDescriptorProto;
    out.push({ files, bytes: files.reduce((n, f) => n + f.byteLength, 0) });
  }
  return out;
}

/** The service, resolved from every file the stream sent (by name, as a reflection client keeps them). */
function resolved(files: Uint8Array[]) {
  const byName = new Map(files.map((f) => fromBinary(FileDescriptorProtoSchema, f)).map((f) => [f.name, f] as const));
  const main = byName.get("entityversions/v1/entity_versions.proto")!;
  return createFileRegistry(main, (name) => byName.get(name)).getService(EntityVersionsService.typeName);
}

test("reflection sends a file's imports once a stream, as grpc-go does: the file asked for again comes alone, and the service still resolves", async () => {
  const ask = create(ServerReflectionRequestSchema, { messageRequest: { case: "fileContainingSymbol", value: EntityVersionsService.typeName } });
  const [first, second] = await answers(service.serverReflectionInfo(twice(ask)));
  assert.ok(first!.files.length > 1, "the first answer carries the file's imports");
  assert.is(second!.files.length, 1, "the second only the file asked for");
  assert.equal(second!.files[0], first!.files[0]);
  assert.ok(second!.bytes * 3 < first!.bytes, `${second!.bytes} bytes against ${first!.bytes}`);
  assert.is(resolved([...first!.files, ...second!.files])?.methods.length, EntityVersionsService.methods.length);
  // Another stream has been sent nothing yet.
  const [again] = await answers(service.serverReflectionInfo(twice(ask)));
  assert.is(again!.files.length, first!.files.length);
});

test("reflection v1alpha sends a file's imports once a stream too", async () => {
  const ask = create(RequestV1alphaSchema, { messageRequest: { case: "fileContainingSymbol", value: EntityVersionsService.typeName } });
  const [first, second] = await answers(service.v1alpha().serverReflectionInfo(twice(ask), undefined as never) as AsyncIterable<never>);
  assert.ok(first!.files.length > 1);
  assert.is(second!.files.length, 1);
});

test.run();
