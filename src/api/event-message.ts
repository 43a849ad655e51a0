import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { AccessChangeKind, type EventSchema, EventType } from "../../gen/entityversions/v1/entity_events_pb.js";
import type { EventRecord } from "../store/event-log.js";

/**
 * An event's id as clients see it: its number within the entity, in
 * decimal. Documented as opaque, so that it may change form; clients pass
 * it back as after_event_id.
 */
export function eventIdOf(seq: number): string {
  return String(seq);
}

/**
 * A recorded event as the API's Event message. An access change names the
 * user or organization it was about only to callers who may see the
 * entity's access lists (GetEntityAccess: its publishers and admins);
 * for readers its `subject_id` is empty: who else the entity is shared
 * with, or which organizations hold it, is not theirs to learn.
 */
export function toEventMessage(e: EventRecord, showSubjects: boolean): MessageInitShape<typeof EventSchema> {
  return {
    id: eventIdOf(e.seq),
    entityId: e.entityId,
    type: EventType[e.type],
    actor: e.actor,
    occurredAt: timestampFromDate(e.occurredAt),
    ...(e.versionId === undefined ? {} : { versionId: e.versionId }),
    ...(e.version === undefined ? {} : { version: e.version }),
    ...(e.previousActiveVersionId === undefined ? {} : { previousActiveVersionId: e.previousActiveVersionId }),
    ...(e.accessKind === undefined ? {} : { accessChange: { kind: AccessChangeKind[e.accessKind], subjectId: showSubjects ? (e.accessSubject ?? "") : "" } }),
  };
}
