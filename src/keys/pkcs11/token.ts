// The module and the token: loading and initialising the module, finding the token by label (or creating it),
// opening the key store's sessions and logging in, and checking that a token's sessions can be used.
import * as graphene from 'graphene-pk11';
import pkcs11js from 'pkcs11js';
import type { Pkcs11KeyStoreOptions } from './options.js';
import { closeQuietly, openSession } from './session-pool.js';

/** Session states of a logged-in user (PKCS#11 CKS_*; pkcs11js does not export them). */
const CKS_RO_USER_FUNCTIONS = 1;
const CKS_RW_USER_FUNCTIONS = 3;

export function loadModule(modulePath: string): graphene.Module {
  const mod = graphene.Module.load(modulePath, 'signbridge-keystore');
  // CKF_OS_LOCKING_OK: signatures run on libuv's thread pool, several at once.
  mod.initialize({ flags: 2 });
  return mod;
}

/** C_Finalize (which ends every session of the process, the signing threads' too) and C_Initialize again. */
export function reinitialiseModule(mod: graphene.Module): void {
  try {
    mod.finalize();
  } catch {
    // not initialised (an earlier C_Initialize failed): initialise below all the same
  }
  mod.initialize({ flags: 2 });
}

/** The key store's sessions on `slot`, logged in as the user (the login is the token's, shared by all of them). */
export function openLoggedIn(slot: graphene.Slot, options: Pkcs11KeyStoreOptions): graphene.Session[] {
  const count = Math.max(1, options.sessions ?? 8);
  const sessions: graphene.Session[] = [];
  try {
    for (let i = 0; i < count; i++) {
      sessions.push(openSession(slot));
    }
    try {
      sessions[0]?.login(options.pin, graphene.UserType.USER);
    } catch (err) {
      if (!/CKR_USER_ALREADY_LOGGED_IN/.test(String(err))) throw err;
    }
    return sessions;
  } catch (err) {
    for (const s of sessions) closeQuietly(s);
    throw err;
  }
}

/** New logged-in sessions on the token found by label, checked to be usable (and closed again when not). */
export function openUsableSessions(mod: graphene.Module, options: Pkcs11KeyStoreOptions): graphene.Session[] {
  const sessions = openLoggedIn(findToken(mod, options.tokenLabel), options);
  try {
    checkUsable(sessions[0] as graphene.Session);
  } catch (err) {
    for (const s of sessions) closeQuietly(s);
    throw err;
  }
  return sessions;
}

/** The slot holding the token labelled `label` now (slot ids may change when a token comes back). */
function findToken(mod: graphene.Module, label: string): graphene.Slot {
  const slot = [...mod.getSlots(true)].find((s) => s.getToken().label.trim() === label);
  if (!slot) throw new Error(`CKR_TOKEN_NOT_PRESENT: no PKCS#11 token labelled "${label}"`);
  return slot;
}

export function findOrInitialiseToken(mod: graphene.Module, options: Pkcs11KeyStoreOptions): graphene.Slot {
  const slots = [...mod.getSlots(true)];
  const labelled = slots.find((s) => s.getToken().label.trim() === options.tokenLabel);
  if (labelled) return labelled;
  if (options.initialiseWithSoPin === undefined) {
    const labels = slots.map((s) => `"${s.getToken().label.trim()}"`).join(', ') || 'none';
    throw new Error(`no PKCS#11 token labelled "${options.tokenLabel}" (tokens present: ${labels})`);
  }
  const free = slots.find((s) => !(s.getToken().flags & graphene.TokenFlag.TOKEN_INITIALIZED));
  if (!free) throw new Error('no uninitialised PKCS#11 slot to create the signbridge token in');
  // graphene's Slot.initToken mishandles pkcs11js 2's return value; call C_InitToken directly.
  free.lib.C_InitToken(free.handle, options.initialiseWithSoPin, options.tokenLabel.padEnd(32, ' '));
  // SoftHSM moves a freshly initialised token to a new slot id: look it up again by label.
  const slot = [...mod.getSlots(true)].find((s) => s.getToken().label.trim() === options.tokenLabel);
  if (!slot) throw new Error(`token "${options.tokenLabel}" vanished after initialisation`);
  const session = openSession(slot);
  try {
    session.login(options.initialiseWithSoPin, graphene.UserType.SO);
    session.initPin(options.pin);
    session.logout();
  } finally {
    session.close();
  }
  return slot;
}

/** Whether `session` is logged in as the user (C_GetSessionInfo; throws what the token answers). */
export function isLoggedIn(session: graphene.Session): boolean {
  const { state } = session.lib.C_GetSessionInfo(session.handle);
  return state === CKS_RO_USER_FUNCTIONS || state === CKS_RW_USER_FUNCTIONS;
}

/**
 * Throws a token fault unless `session` is logged in and the token's objects can be searched: a token that came
 * back after going away can open sessions and still fail every use (SoftHSM answers CKR_GENERAL_ERROR).
 */
function checkUsable(session: graphene.Session): void {
  const lib = session.lib;
  if (!isLoggedIn(session)) {
    throw new Error('CKR_USER_NOT_LOGGED_IN: the new session is not logged in');
  }
  lib.C_FindObjectsInit(session.handle, [{ type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_PRIVATE_KEY }]);
  try {
    lib.C_FindObjects(session.handle, 1);
  } finally {
    lib.C_FindObjectsFinal(session.handle);
  }
}

/** Whether `session` still answers C_GetSessionInfo. */
export function sessionAnswers(session: graphene.Session): boolean {
  try {
    session.lib.C_GetSessionInfo(session.handle);
    return true;
  } catch {
    return false;
  }
}
