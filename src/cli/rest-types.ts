// The REST JSON the CLI reads, as the gateway writes it from the proto
// (proto/entityversions/v1/*.proto, the source of truth): snake_case names,
// implicit-presence fields always present, optional ones absent when unset.
// Only what the CLI reads is typed; --json prints the answers as they came.

/** A Version as REST writes it. */
export interface RestVersion {
  id: string;
  entity_id: string;
  version: string;
  source_hash: string;
  storage_path: string;
  file_size_bytes: number | string;
  package_lock_path?: string;
  service_dependencies: string[];
  package_json?: Record<string, unknown>;
  base_version_id?: string;
  published_by: string;
  created_at: string;
  is_active: boolean;
  /** Base64 MD5 of the package as the blob store reports it; absent on services and versions that do not record it. */
  package_md5?: string;
}

/** The tip in a STALE_BASE error body; null when the entity has no versions. */
export interface RestVersionRef {
  id: string;
  version: string;
  published_by: string;
  created_at: string;
}

/** GetUploadUrl's answer: either `existing_version` (deduplicated) or the upload URLs. */
export interface RestUploadUrlAnswer {
  existing_version?: RestVersion;
  upload_url?: string;
  storage_path?: string;
  lockfile_upload_url?: string;
  package_lock_path?: string;
  expires_at?: string;
  upload_headers?: Record<string, string>;
  /** The largest package confirm accepts (a number; a string only past 2^53 - 1). */
  max_file_size_bytes?: number | string;
  /** The most bytes of JSON, and JSON values, confirm accepts in package_json. */
  max_package_json_bytes?: number | string;
  max_package_json_values?: number | string;
}

/** ConfirmUpload's answer. */
export interface RestConfirmAnswer {
  version: RestVersion;
  created: boolean;
  /** Absent from services older than the field. */
  already_confirmed?: boolean;
}

/** GetDownloadUrl's answer. */
export interface RestDownloadAnswer {
  download_url: string;
  expires_at?: string;
  version: RestVersion;
  lockfile_download_url?: string;
}

/** ListVersions' answer (newest first). */
export interface RestVersionList {
  versions: RestVersion[];
  next_page_token: string;
}

/** One event of an entity, as ListEvents and WatchEvents answer it (only the fields the CLI reads). */
export interface RestEvent {
  id: string;
  type: string;
  actor: string;
  occurred_at?: string;
  version_id?: string;
  version?: string;
  previous_active_version_id?: string;
  access_change?: { kind: string; subject_id?: string };
}

/** One message of WatchEvents' REST stream: `{"result": …}` per line. */
export interface RestWatchMessage {
  event?: RestEvent;
  bookmark?: { last_event_id: string };
}

/** ListEvents' answer (newest first). */
export interface RestEventList {
  events: RestEvent[];
  next_page_token: string;
}

/** GetEntityAccess's answer, also the answer of every access change. */
export interface RestEntityAccess {
  entity_id: string;
  publishers: string[];
  shares: string[];
  org_stores: string[];
  public_store: boolean;
}
