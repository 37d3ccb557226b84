import { describe, expect, it } from 'vitest';
import { checkArguments } from './toolArgs';

const ECHO = '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}';

describe('edited tool arguments', () => {
  it('must be JSON', async () => {
    expect(await checkArguments('{"text": ', ECHO)).toMatch(/^The arguments are not JSON/);
  });
  it("must fit the tool's input schema, naming the place", async () => {
    expect(await checkArguments('{"text": 3}', ECHO)).toBe("The arguments do not fit the tool's input schema: at /text: must be string");
    expect(await checkArguments('{}', ECHO)).toBe("The arguments do not fit the tool's input schema: at /: must have required property 'text'");
    expect(await checkArguments('{"text":"a","b":1}', ECHO)).toBe(
      "The arguments do not fit the tool's input schema: at /: must NOT have additional properties: b",
    );
  });
  it('pass when they fit, or when the tool has no schema', async () => {
    expect(await checkArguments('{"text":"edited"}', ECHO)).toBeNull();
    expect(await checkArguments('[1, 2]', null)).toBeNull();
  });
});
