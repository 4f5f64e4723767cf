export { LAYOUT_VERSION, RedisSessionService } from './service.js';
export type { RedisSessionServiceOptions } from './service.js';
export {
  AlreadyExistsError,
  CorruptDataError,
  IncompleteSessionError,
  InvalidInputError,
  LayoutVersionError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RedisSessionsError,
  SessionNotFoundError,
  StaleSessionError,
  StoreFullError,
} from './errors.js';
export { KeySpace, escape, unescape } from './keys.js';
export { decodeEvent, encodeEvent } from './codec.js';
export { luaSource } from './scripts.js';
