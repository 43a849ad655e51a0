import { BlobServiceClient } from "@azure/storage-blob";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { blobUrl } from "../../src/blob/azure-blob-store.js";

// Azurite's public, well-known development account (no secret).
const devKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

test("blob URLs are escaped exactly as the SDK's own blob client escapes them", () => {
  const accounts = [
    `DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=${devKey};BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;`,
    `DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=${devKey};EndpointSuffix=core.windows.net`,
  ];
  const paths = [
    "my-entity_1/0f8fad5b-d9cb-469f-a165-70867728950e/package",
    "my-entity_1/0f8fad5b-d9cb-469f-a165-70867728950e/package-lock.json",
    "odd name/with spaces/é ü.tgz",
    "a+b/c=d/e&f?g#h",
  ];
  for (const account of accounts) {
    const container = BlobServiceClient.fromConnectionString(account).getContainerClient("entity-versions");
    for (const path of paths) assert.is(blobUrl(container.url, path), container.getBlobClient(path).url, path);
  }
});

test.run();
