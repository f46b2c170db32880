// The client's wire types against openapi/openapi.json: each type of
// src/wire.ts (the bodies as sent and as answered, before the client makes
// its friendlier results of them) is read with the TypeScript compiler and
// compared with its schema in the document: the same properties, required
// in the schema exactly when not optional in TypeScript, and the same kinds
// (string, number for integer and number, boolean, array, object, a string
// enum as a union of its literals). WIRE says which schema each type is;
// every type the package exports is in WIRE or, with the reason it is no
// body on the wire, in NOT_WIRE, so a new exported type must be placed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..");
const doc = JSON.parse(readFileSync(resolve(root, "../../openapi/openapi.json"), "utf8"));

// Where a schema is: in components.schemas, or a route's request or answer.
const schema = (name) => `#/components/schemas/${name}`;
const route = (method, path) => `#/paths/${path.replaceAll("~", "~0").replaceAll("/", "~1")}/${method.toLowerCase()}`;
const request = (method, path) => `${route(method, path)}/requestBody/content/application~1json/schema`;
const answer = (method, path, status) => `${route(method, path)}/responses/${status}/content/application~1json/schema`;

// WIRE: each wire type and the schemas it must be. "subset" marks a type
// that is one shape of its schema: its properties are the schema's, and
// required where the schema's are, but it may leave some out or require
// more (one member of a union, or a body that leaves fields unsent).
const WIRE = {
  Algorithm: [`${schema("Policy")}/properties/algorithm`],
  Duration: [schema("Duration")],
  Penalty: [schema("Penalty")],
  Policy: [schema("Policy")],
  InlineCheck: [schema("Check")],
  KeyParts: [`${schema("CheckRequest")}/properties/key`, `${schema("LeaseRequest")}/properties/key`],
  EndpointCheck: [{ subset: request("POST", "/v1/check") }],
  PoliciesCheck: [{ subset: request("POST", "/v1/check") }],
  InlineChecks: [{ subset: request("POST", "/v1/check") }],
  CheckRequest: [request("POST", "/v1/check")],
  // Renew and release send no units (the key is in the token).
  LeaseRequest: [{ subset: request("POST", "/v1/leases/{token}/renew") }, { subset: request("DELETE", "/v1/leases/{token}") }],
  LeaseAcquireRequest: [request("POST", "/v1/leases")],
  Lease: [schema("Lease")],
  Decision: [
    schema("Decision"),
    answer("POST", "/v1/leases/{token}/renew", 200),
    answer("DELETE", "/v1/leases/{token}", 200),
  ],
  CheckResponseBody: [
    answer("POST", "/v1/check", 200),
    answer("POST", "/v1/check", 429),
    answer("POST", "/v1/leases", 200),
    answer("POST", "/v1/leases", 429),
  ],
  AcquireBody: [request("POST", "/v1/upstreams/{name}/acquire")],
  AcquireGrantBody: [answer("POST", "/v1/upstreams/{name}/acquire", 200)],
  UpstreamShortBody: [answer("POST", "/v1/upstreams/{name}/acquire", 429)],
  Session: [answer("PUT", "/v1/tenants/{id}/sessions", 201), answer("GET", "/v1/tenants/{id}/sessions/{session}", 200)],
  AdmitBody: [answer("GET", "/v1/ws/admit", 200)],
  // The 429 of GET /v1/ws/admit and GET /v1/ws: a connect refused by the
  // gateway's limits.
  ConnectRefusalBody: [schema("ConnectRefusal"), answer("GET", "/v1/ws/admit", 429), answer("GET", "/v1/ws", 429)],
  ErrorBody: [schema("Error")],
};

// NOT_WIRE: the exported types that are no body on the wire, and why.
const NOT_WIRE = {
  CheckResult: "the client's result, made of CheckResponseBody or Decision",
  LeaseResult: "the client's result, made of CheckResponseBody or Decision",
  AcquireRequest: "the client's: maxWaitMs is sent as AcquireBody's maxWait",
  AcquireResult: "the client's result, made of AcquireGrantBody or UpstreamShortBody (grantedAt a Date)",
  Admission: "the client's result, made of AdmitBody or ConnectRefusalBody and the status",
  ErrorCode: "SluiceError.code: ErrorBody's error, and the client's own \"network\"",
  SluiceOptions: "the client's options",
  CallOptions: "the client's options",
  ConnectOptions: "the client's options",
  WebSocketLike: "the platform's WebSocket",
  WebSocketConstructor: "the platform's WebSocket",
  Frame: "a WebSocket frame: the document leaves out the protocol after the upgrade",
  CloseKind: "a WebSocket close code, named",
  CloseDetail: "an event of GatewayConnection",
  ReconnectDetail: "an event of GatewayConnection",
  GatewayEvents: "the events of GatewayConnection",
};

const options = {
  ...ts.convertCompilerOptionsFromJson(JSON.parse(readFileSync(resolve(root, "tsconfig.json"), "utf8")).compilerOptions, root)
    .options,
  noEmit: true,
};
const program = ts.createProgram([resolve(root, "src/index.ts")], options);
// checker is the program's; the test of the comparison swaps in its own.
let checker = program.getTypeChecker();

// exportedTypes: the interfaces and type aliases a module exports, by name.
function exportedTypes(file) {
  const source = program.getSourceFile(resolve(root, file));
  assert.ok(source, `${file} is not in the program`);
  const types = new Map();
  for (let sym of checker.getExportsOfModule(checker.getSymbolAtLocation(source))) {
    if (sym.flags & ts.SymbolFlags.Alias) sym = checker.getAliasedSymbol(sym);
    if (sym.flags & (ts.SymbolFlags.Interface | ts.SymbolFlags.TypeAlias)) types.set(sym.name, checker.getDeclaredTypeOfSymbol(sym));
  }
  return types;
}

// label names a pointer for a reader: "POST /v1/check 429", "Session".
function label(pointer) {
  const parts = pointer.slice(2).split("/").map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~"));
  if (parts[0] === "components" && parts[1] === "schemas") return parts.slice(2).join(".");
  if (parts[0] !== "paths") return pointer;
  const [, path, method, what, status] = parts;
  return `${method.toUpperCase()} ${path} ${what === "requestBody" ? "request" : status}`;
}

// at resolves a JSON pointer in the document, following $ref on the way.
function at(pointer) {
  assert.ok(pointer.startsWith("#/"), `not a pointer into the document: ${pointer}`);
  let node = doc;
  for (const raw of pointer.slice(2).split("/")) {
    node = deref(node);
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (node === null || typeof node !== "object" || !(key in node)) return undefined;
    node = node[key];
  }
  return deref(node);
}

function deref(node) {
  const seen = new Set();
  while (node !== null && typeof node === "object" && typeof node.$ref === "string") {
    assert.ok(!seen.has(node.$ref), `a $ref cycle at ${node.$ref}`);
    seen.add(node.$ref);
    const target = at(node.$ref);
    assert.ok(target !== undefined, `a $ref to nothing: ${node.$ref}`);
    node = target;
  }
  return node;
}

// A TypeScript type's members: its union's, with undefined and never left out.
function members(type) {
  const all = type.isUnion() ? type.types : [type];
  return all.filter((t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Never | ts.TypeFlags.Void)));
}

function kindOfType(t) {
  if (t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return "any";
  if (t.flags & ts.TypeFlags.StringLike) return "string";
  if (t.flags & ts.TypeFlags.NumberLike) return "number";
  if (t.flags & ts.TypeFlags.BooleanLike) return "boolean";
  if (t.flags & ts.TypeFlags.Null) return "null";
  if (checker.isArrayType(t)) return "array";
  if (t.flags & ts.TypeFlags.Object || t.isIntersection()) return "object";
  return `unsupported(${checker.typeToString(t)})`;
}

const KIND = { string: "string", number: "number", integer: "number", boolean: "boolean", array: "array", object: "object", null: "null" };

// A schema's alternatives, each {kind, schema}: oneOf and anyOf split, a
// list of types split, const and enum kinded by their values.
function alternatives(s) {
  s = deref(s);
  if (s === true || s === undefined) return [{ kind: "any", schema: {} }];
  for (const k of ["allOf", "not", "if", "$dynamicRef"]) assert.ok(!(k in s), `the test does not read ${k}: write the schema flat`);
  const split = s.oneOf ?? s.anyOf;
  if (split) return split.flatMap(alternatives);
  const values = "const" in s ? [s.const] : s.enum;
  if (values) {
    const kinds = new Set(values.map((v) => (v === null ? "null" : KIND[typeof v] ?? typeof v)));
    return [...kinds].map((kind) => ({ kind, schema: s, values: values.filter((v) => (v === null ? "null" : KIND[typeof v]) === kind) }));
  }
  if (Array.isArray(s.type)) return s.type.map((type) => ({ kind: KIND[type], schema: { ...s, type } }));
  if (s.type) return [{ kind: KIND[s.type] ?? s.type, schema: s }];
  if (s.properties || s.additionalProperties !== undefined) return [{ kind: "object", schema: s }];
  return [{ kind: "any", schema: s }];
}

// compare(type, schema, where) returns the disagreements between a type
// (or the union of a list of types) and a schema, each naming where it is.
function compare(type, s, where, subset = false) {
  const errs = [];
  const tsMembers = Array.isArray(type) ? type.flatMap(members) : members(type);
  const name = Array.isArray(type) ? tsMembers.map((t) => checker.typeToString(t)).join(" | ") : checker.typeToString(type);
  const byKind = new Map();
  for (const t of tsMembers) {
    const k = kindOfType(t);
    if (!byKind.has(k)) byKind.set(k, []);
    byKind.get(k).push(t);
  }
  const alts = alternatives(s);
  const altKinds = new Map();
  for (const a of alts) {
    if (!altKinds.has(a.kind)) altKinds.set(a.kind, []);
    altKinds.get(a.kind).push(a);
  }
  const tsKinds = [...byKind.keys()].sort().join("|");
  const schemaKinds = [...altKinds.keys()].sort().join("|");
  if (tsKinds !== schemaKinds) {
    return [`${where}: TypeScript ${name} is ${tsKinds || "nothing"}, the schema ${schemaKinds}`];
  }
  for (const [kind, ts_] of byKind) {
    const as = altKinds.get(kind);
    switch (kind) {
      case "string":
      case "number": {
        const literals = ts_.filter((t) => t.isLiteral());
        const wide = ts_.length > literals.length;
        const values = as.some((a) => !a.values) ? undefined : as.flatMap((a) => a.values);
        if (values === undefined && !wide) {
          errs.push(`${where}: TypeScript ${name} allows only its literals, the schema any ${kind}`);
        } else if (values !== undefined) {
          const got = literals.map((t) => t.value).sort();
          if (wide || JSON.stringify(got) !== JSON.stringify([...values].sort())) {
            errs.push(`${where}: TypeScript ${name}, the schema's values ${JSON.stringify(values)}`);
          }
        }
        break;
      }
      case "boolean": {
        const got = ts_.map((t) => checker.typeToString(t) === "true").sort();
        const values = as.some((a) => !a.values) ? [false, true] : as.flatMap((a) => a.values).sort();
        if (JSON.stringify([...new Set(got)]) !== JSON.stringify([...new Set(values)])) {
          errs.push(`${where}: TypeScript ${name}, the schema's values ${JSON.stringify(values)}`);
        }
        break;
      }
      case "array": {
        if (ts_.length !== 1 || as.length !== 1) {
          errs.push(`${where}: more than one array type`);
          break;
        }
        const items = as[0].schema.items;
        errs.push(...compare(checker.getTypeArguments(ts_[0])[0], items === undefined ? true : items, `${where}[]`));
        break;
      }
      case "object": {
        if (as.length === 1) {
          errs.push(...compareObject(ts_, as[0].schema, where, subset));
          break;
        }
        // Several objects on both sides: each must match one of the other's.
        for (const t of ts_) {
          if (!as.some((a) => compareObject([t], a.schema, where, subset).length === 0)) {
            errs.push(`${where}: TypeScript ${checker.typeToString(t)} matches none of the schema's objects`);
          }
        }
        for (const a of as) {
          if (!ts_.some((t) => compareObject([t], a.schema, where, subset).length === 0)) {
            errs.push(`${where}: the schema's object ${JSON.stringify(a.schema).slice(0, 80)} matches no TypeScript type`);
          }
        }
        break;
      }
    }
  }
  return errs;
}

// compareObject compares object types (one, or a union's members, taken as
// one: a property is required when every member requires it) with an
// object schema.
function compareObject(types, s, where, subset) {
  const errs = [];
  const props = s.properties ?? {};
  const required = new Set(s.required ?? []);
  const extra = s.additionalProperties;
  const names = new Map(); // name -> {types, required count}
  let indexType;
  for (const t of types) {
    for (const p of checker.getPropertiesOfType(t)) {
      const pt = checker.getTypeOfSymbol(p);
      if (members(pt).length === 0) continue; // `?: never`: not in this member
      const e = names.get(p.name) ?? { types: [], required: 0 };
      e.types.push(pt);
      if (!(p.flags & ts.SymbolFlags.Optional)) e.required++;
      names.set(p.name, e);
    }
    const index = checker.getIndexInfosOfType(t).find((i) => i.keyType.flags & ts.TypeFlags.String);
    if (index) indexType = index.type;
  }
  if (indexType !== undefined) {
    if (extra === false) errs.push(`${where}: TypeScript has an index signature, the schema allows no other properties`);
    else if (names.size === 0) {
      // A record: Record<string, T> is additionalProperties T.
      if (Object.keys(props).length > 0) errs.push(`${where}: TypeScript is a record, the schema names properties`);
      if (extra === undefined || extra === true) errs.push(`${where}: TypeScript is a record of ${checker.typeToString(indexType)}, the schema names no additionalProperties`);
      else errs.push(...compare(indexType, extra, `${where}{*}`));
    }
  }
  for (const [name, e] of names) {
    const at_ = `${where}.${name}`;
    if (!(name in props)) {
      errs.push(`${at_}: in TypeScript, not in the schema`);
      continue;
    }
    const tsRequired = e.required === types.length;
    if (required.has(name) && !tsRequired) errs.push(`${at_}: required in the schema, optional in TypeScript`);
    if (!required.has(name) && tsRequired && !subset) errs.push(`${at_}: optional in the schema, required in TypeScript`);
    errs.push(...compare(e.types.length === 1 ? e.types[0] : e.types, props[name], at_));
  }
  if (!subset) {
    for (const name of Object.keys(props)) {
      if (!names.has(name)) errs.push(`${where}.${name}: in the schema, not in TypeScript`);
    }
  }
  return errs;
}

test("the client's wire types agree with openapi/openapi.json", async (t) => {
  const wire = exportedTypes("src/wire.ts");
  const all = exportedTypes("src/index.ts");

  await t.test("every exported type is placed: a wire type with its schema, or not on the wire", () => {
    const unplaced = [...all.keys()].filter((name) => !(name in WIRE) && !(name in NOT_WIRE));
    assert.deepEqual(unplaced, [], "exported types neither in WIRE (with their schema) nor in NOT_WIRE (with why)");
    const stale = [...Object.keys(WIRE), ...Object.keys(NOT_WIRE)].filter((name) => !all.has(name));
    assert.deepEqual(stale, [], "types in WIRE or NOT_WIRE that the package does not export");
    const both = Object.keys(WIRE).filter((name) => name in NOT_WIRE);
    assert.deepEqual(both, [], "types both in WIRE and NOT_WIRE");
    const notInWire = Object.keys(WIRE).filter((name) => !wire.has(name));
    assert.deepEqual(notInWire, [], "wire types not declared in src/wire.ts");
    const notMapped = [...wire.keys()].filter((name) => !(name in WIRE));
    assert.deepEqual(notMapped, [], "types of src/wire.ts without their schema in WIRE");
  });

  for (const [name, targets] of Object.entries(WIRE)) {
    await t.test(name, () => {
      const type = all.get(name);
      assert.ok(type, `${name} is not exported`);
      const errs = [];
      for (const target of targets) {
        const pointer = typeof target === "string" ? target : target.subset;
        const s = at(pointer);
        if (s === undefined) {
          errs.push(`${pointer}: not in the document`);
          continue;
        }
        errs.push(...compare(type, s, `${name} (${label(pointer)})`, typeof target !== "string"));
      }
      assert.deepEqual(errs, []);
    });
  }
});

// The comparison itself, on types made to disagree, so that a check that
// never fails cannot pass for one that holds.
test("the comparison finds disagreements", () => {
  const source = `
    export interface Good { a: string; b?: number; c: "x" | "y"; d: boolean; e: string[]; f: Record<string, string> }
    export interface Missing { a: string; b?: number; c: "x" | "y"; d: boolean; e: string[] }
    export interface Extra { a: string; b?: number; c: "x" | "y"; d: boolean; e: string[]; f: Record<string, string>; g: string }
    export interface Optional { a?: string; b?: number; c: "x" | "y"; d: boolean; e: string[]; f: Record<string, string> }
    export interface Required { a: string; b: number; c: "x" | "y"; d: boolean; e: string[]; f: Record<string, string> }
    export interface Kind { a: number; b?: number; c: "x" | "y"; d: boolean; e: string[]; f: Record<string, string> }
    export interface Enum { a: string; b?: number; c: "x" | "z"; d: boolean; e: string[]; f: Record<string, string> }
    export interface Items { a: string; b?: number; c: "x" | "y"; d: boolean; e: number[]; f: Record<string, string> }
    export interface Values { a: string; b?: number; c: "x" | "y"; d: boolean; e: string[]; f: Record<string, number> }
    export interface Literal { a: string; b?: number; c: "x" | "y"; d: true; e: string[]; f: Record<string, string> }
  `;
  const s = {
    type: "object",
    properties: {
      a: { type: "string" },
      b: { type: "integer" },
      c: { type: "string", enum: ["x", "y"] },
      d: { type: "boolean" },
      e: { type: "array", items: { type: "string" } },
      f: { type: "object", additionalProperties: { type: "string" } },
    },
    required: ["a", "c", "d", "e", "f"],
  };
  const host = ts.createCompilerHost(options);
  const file = resolve(root, "test/__made.ts");
  const read = host.getSourceFile;
  host.getSourceFile = (name, ...rest) => (name === file ? ts.createSourceFile(name, source, ts.ScriptTarget.ES2022) : read(name, ...rest));
  const made = ts.createProgram([file], options, host);
  const c = made.getTypeChecker();
  const types = new Map(
    c.getExportsOfModule(c.getSymbolAtLocation(made.getSourceFile(file))).map((sym) => [sym.name, c.getDeclaredTypeOfSymbol(sym)]),
  );
  const saved = checker;
  checker = c;
  try {
    assert.deepEqual(compare(types.get("Good"), s, "Good"), []);
    for (const [name, want] of [
      ["Missing", /f: in the schema, not in TypeScript/],
      ["Extra", /g: in TypeScript, not in the schema/],
      ["Optional", /a: required in the schema, optional in TypeScript/],
      ["Required", /b: optional in the schema, required in TypeScript/],
      ["Kind", /a: TypeScript number is number, the schema string/],
      ["Enum", /c: TypeScript "x" \| "z", the schema's values \["x","y"\]/],
      ["Items", /e\[\]: TypeScript number is number, the schema string/],
      ["Values", /f\{\*\}: TypeScript number is number, the schema string/],
      ["Literal", /d: TypeScript true, the schema's values \[false,true\]/],
    ]) {
      const errs = compare(types.get(name), s, name);
      assert.ok(errs.some((e) => want.test(e)), `${name}: want ${want}, got ${JSON.stringify(errs)}`);
    }
  } finally {
    checker = saved;
  }
});
