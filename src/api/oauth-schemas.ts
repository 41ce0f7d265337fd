// Schemas of the /oauth endpoints (sign-in, device flow, key self-service): validation and the OpenAPI document.
import { Type } from '@sinclair/typebox';
import { TENANT_ID_PATTERN } from './schemas.js';

const Nullable = <T extends ReturnType<typeof Type.String>>(schema: T) => Type.Union([schema, Type.Null()]);

export const DeviceStartRequest = Type.Object(
  {
    tenant_id: Type.Optional(
      Type.String({
        pattern: TENANT_ID_PATTERN,
        description: 'tenant the key is for; without it the confirming person picks one of theirs',
      }),
    ),
    client_name: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, description: 'shown on the confirmation page (e.g. the host name)' }),
    ),
  },
  { additionalProperties: false, title: 'DeviceStartRequest' },
);

export const DeviceStartResponse = Type.Object(
  {
    device_code: Type.String({ description: 'secret for polling; 256-bit random, single use' }),
    user_code: Type.String({ description: 'code the person types or checks, XXXX-XXXX (RFC 8628 base-20)' }),
    verification_uri: Type.String(),
    verification_uri_complete: Type.String({ description: 'pre-fills the code; the page still asks to confirm' }),
    expires_in: Type.Integer({ description: 'seconds the codes live (600)' }),
    interval: Type.Integer({ description: 'seconds between polls (5); slow_down adds 5' }),
  },
  { title: 'DeviceStartResponse' },
);

export const DevicePollQuery = Type.Object(
  { device_code: Type.String({ minLength: 1, maxLength: 128 }) },
  { additionalProperties: false },
);

export const DevicePollResponse = Type.Object(
  {
    api_key: Type.String({ description: 'Bearer API key, shown this once' }),
    token_type: Type.Literal('Bearer'),
    tenant_id: Type.String(),
    roles: Type.Array(Type.String()),
    expires_in: Type.Integer({ description: 'seconds until the key expires' }),
    expires_at: Type.String({ format: 'date-time' }),
    email: Nullable(Type.String({ description: 'the verified email of the person, if any' })),
  },
  { title: 'DevicePollResponse' },
);

export const RevokeResponse = Type.Object({ revoked: Type.Literal(true) }, { title: 'RevokeResponse' });

export const WhoamiResponse = Type.Object(
  {
    tenant_id: Nullable(Type.String()),
    roles: Type.Array(Type.String()),
    expires_at: Nullable(Type.String({ format: 'date-time' })),
    email: Nullable(Type.String()),
    subject: Nullable(Type.String()),
    kind: Type.Union([Type.Literal('person'), Type.Literal('admin')]),
  },
  { title: 'WhoamiResponse' },
);

export const StartQuery = Type.Object(
  {
    return_to: Type.Optional(
      Type.String({ maxLength: 2048, description: 'path on this service to return to after sign-in' }),
    ),
  },
  { additionalProperties: false },
);
