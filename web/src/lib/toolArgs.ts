// Edited arguments of a tool call are checked before they are sent: they must be JSON, and
// satisfy the tool's input schema (ToolInfo.inputSchema) where it has one. The schema check
// uses Ajv through @rjsf/validator-ajv8 (the question forms' validator), loaded on first use.

type AjvError = { instancePath?: string; message?: string; params?: Record<string, unknown> };

/** Why `text` cannot be sent as the call's arguments, or null when it can. */
export async function checkArguments(text: string, inputSchema: string | null | undefined): Promise<string | null> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return `The arguments are not JSON: ${(e as Error).message}`;
  }
  if (!inputSchema) return null;
  let schema: object;
  try {
    schema = JSON.parse(inputSchema) as object;
  } catch {
    return null; // a tool's schema we cannot read: the server checks
  }
  const { default: validator } = await import('@rjsf/validator-ajv8');
  const { errors, validationError } = validator.rawValidation<AjvError>(schema, value);
  if (validationError) return null;
  const first = errors?.[0];
  if (!first) return null;
  const extra = typeof first.params?.additionalProperty === 'string' ? `: ${first.params.additionalProperty}` : '';
  return `The arguments do not fit the tool's input schema: at ${first.instancePath || '/'}: ${first.message ?? 'invalid'}${extra}`;
}
