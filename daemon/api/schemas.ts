/** TypeBox schemas of the lifecycle API's bodies: the single source of validation and types. */
import { Type, type Static } from '@sinclair/typebox';

const StringMap = Type.Record(Type.String({ maxLength: 256 }), Type.String({ maxLength: 65536 }), { maxProperties: 256 });

/** Fields the protocol defines and this daemon does not implement: accepted only empty, else 501. */
export const UNSUPPORTED_FIELDS = ['snapshotId', 'templateId', 'networkPolicy', 'volumes', 'credentialProxy', 'lifecycle', 'resourceRequests'] as const;

export const CreateSandboxBody = Type.Object(
  {
    // Optional here so that a create from a snapshot (no image) is answered 501, not 400: createInput requires it.
    image: Type.Optional(Type.Object({ uri: Type.String({ minLength: 1, maxLength: 1024 }), auth: Type.Optional(Type.Unknown()) }, { additionalProperties: false })),
    entrypoint: Type.Array(Type.String({ maxLength: 65536 }), { minItems: 1, maxItems: 256 }),
    timeout: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
    resourceLimits: Type.Object({ cpu: Type.String({ maxLength: 32 }), memory: Type.String({ maxLength: 32 }) }, { additionalProperties: false }),
    env: Type.Optional(StringMap),
    metadata: Type.Optional(StringMap),
    extensions: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    secureAccess: Type.Optional(Type.Boolean()),
    platform: Type.Optional(Type.Unknown()),
    snapshotId: Type.Optional(Type.Unknown()),
    templateId: Type.Optional(Type.Unknown()),
    networkPolicy: Type.Optional(Type.Unknown()),
    volumes: Type.Optional(Type.Unknown()),
    credentialProxy: Type.Optional(Type.Unknown()),
    lifecycle: Type.Optional(Type.Unknown()),
    resourceRequests: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type CreateSandboxBody = Static<typeof CreateSandboxBody>;

export const RenewBody = Type.Object({ expiresAt: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
export type RenewBody = Static<typeof RenewBody>;

export const ErrorBody = Type.Object({ code: Type.String(), message: Type.String() }, { additionalProperties: false });
