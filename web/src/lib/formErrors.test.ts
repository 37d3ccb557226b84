import { describe, expect, it } from 'vitest';
import { errorTreeFor, schemaErrorPlace } from './formErrors';

describe('schema errors at their field', () => {
  it("reads the server's place and message", () => {
    expect(schemaErrorPlace("The answer does not fit the question's form: at /age: must be >= 0 but found -1")).toEqual({
      path: ['age'],
      message: 'must be >= 0 but found -1',
    });
    expect(schemaErrorPlace('the arguments do not fit the tool\'s input schema: at /: missing property "text"')).toEqual({
      path: [],
      message: 'missing property "text"',
    });
    expect(schemaErrorPlace('at /a~1b/0: bad')).toEqual({ path: ['a/b', '0'], message: 'bad' });
    expect(schemaErrorPlace('this question was already answered')).toBeNull();
  });

  it('builds the error tree @rjsf/core shows at the field', () => {
    expect(errorTreeFor("The answer does not fit the question's form: at /age: must be >= 0")).toEqual({
      age: { __errors: ['must be >= 0'] },
    });
    expect(errorTreeFor('at /person/name: too short')).toEqual({ person: { name: { __errors: ['too short'] } } });
    expect(errorTreeFor('at /: missing property "name"')).toEqual({ __errors: ['missing property "name"'] });
    expect(errorTreeFor('Cannot reach the server.')).toBeUndefined();
    expect(errorTreeFor(null)).toBeUndefined();
  });
});
