import {
  getIntrospectionQuery,
  Kind,
  parse,
  type FragmentDefinitionNode,
  type OperationDefinitionNode,
  type SelectionSetNode,
} from 'graphql';
import { describe, expect, it } from 'vitest';
import { cleanToken } from './auth';
import { operationType, requestHeaders, shallowIntrospection } from './fetcher';
import { EventStreamParser } from './sse';

describe('EventStreamParser', () => {
  it('reads the server\'s next and complete frames, however the text is cut', () => {
    const stream = 'event: next\ndata: {"data":{"n":1}}\n\nevent: next\ndata: {"data":{"n":2}}\n\nevent: complete\n\n';
    for (const size of [1, 3, 7, stream.length]) {
      const parser = new EventStreamParser();
      const events = [];
      for (let i = 0; i < stream.length; i += size) events.push(...parser.push(stream.slice(i, i + size)));
      expect(events).toEqual([
        { event: 'next', data: '{"data":{"n":1}}' },
        { event: 'next', data: '{"data":{"n":2}}' },
        { event: 'complete', data: '' },
      ]);
    }
  });

  it('takes CR LF line ends, comments, multi-line data and nameless events', () => {
    const parser = new EventStreamParser();
    expect(parser.push(': keep-alive\r\n\r\ndata: a\r')).toEqual([]);
    expect(parser.push('\ndata: b\r\n\r\n')).toEqual([{ event: 'message', data: 'a\nb' }]);
  });
});

/** Depth as the server counts it: fields nest, fragments are expanded. */
function depth(query: string): number {
  const doc = parse(query);
  const frags = new Map(
    doc.definitions
      .filter((d): d is FragmentDefinitionNode => d.kind === Kind.FRAGMENT_DEFINITION)
      .map((f) => [f.name.value, f]),
  );
  const walk = (set: SelectionSetNode | undefined, level: number): number => {
    let deepest = level;
    for (const sel of set?.selections ?? []) {
      if (sel.kind === Kind.FIELD) deepest = Math.max(deepest, walk(sel.selectionSet, level + 1));
      else if (sel.kind === Kind.INLINE_FRAGMENT) deepest = Math.max(deepest, walk(sel.selectionSet, level));
      else deepest = Math.max(deepest, walk(frags.get(sel.name.value)?.selectionSet, level));
    }
    return deepest;
  };
  const op = doc.definitions.find((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION)!;
  return walk(op.selectionSet, 0);
}

describe('shallowIntrospection', () => {
  it("brings GraphiQL's introspection query within the server's depth limit of 12", () => {
    const full = getIntrospectionQuery({ inputValueDeprecation: true, schemaDescription: true });
    expect(depth(full)).toBeGreaterThan(12);
    const shallow = shallowIntrospection(full);
    expect(depth(shallow)).toBeLessThanOrEqual(12);
    // Still four wrappers deep: [[T!]!]! and the like.
    expect(shallow.match(/ofType/g)?.length).toBe(5);
    expect(shallow).toContain('IntrospectionQuery');
  });

  it('leaves a query it cannot parse alone', () => {
    expect(shallowIntrospection('{ broken')).toBe('{ broken');
  });
});

describe('operationType', () => {
  it('finds the operation to run', () => {
    expect(operationType('subscription S { x }')).toBe('subscription');
    expect(operationType('{ viewer { id } }')).toBe('query');
    expect(operationType('query A { a } subscription B { b }', 'B')).toBe('subscription');
    expect(operationType('query A { a } subscription B { b }')).toBeNull();
    expect(operationType('not graphql')).toBeNull();
  });
});

describe('requestHeaders', () => {
  it('sends the token unless the headers editor sets its own', () => {
    expect(requestHeaders('t1', {}, 'text/event-stream')).toEqual({
      'Content-Type': 'application/json',
      Accept: 'text/event-stream',
      Authorization: 'Bearer t1',
    });
    expect(requestHeaders('t1', { Authorization: 'Bearer mine', 'X-Trace': 1 }, 'application/json')).toMatchObject({
      Authorization: 'Bearer mine',
      'X-Trace': '1',
    });
    expect(requestHeaders(null, undefined, 'application/json')).not.toHaveProperty('Authorization');
  });
});

describe('cleanToken', () => {
  it('takes a token as people paste it', () => {
    expect(cleanToken('  Bearer abc.def.ghi \n')).toBe('abc.def.ghi');
    expect(cleanToken('"abc.def.ghi"')).toBe('abc.def.ghi');
    expect(cleanToken('abc')).toBe('abc');
  });
});
