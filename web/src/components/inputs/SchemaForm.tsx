// A form generated from a question's answerSchema by @rjsf/core, validated in the page by
// Ajv (@rjsf/validator-ajv8) against the same schema the server checks. Loaded on first use
// (React.lazy): chats without such a question never load it.

import Form from '@rjsf/core';
import type { RJSFSchema, UiSchema } from '@rjsf/utils';
import validator from '@rjsf/validator-ajv8';
import { useMemo, useState } from 'react';
import { errorTreeFor } from '../../lib/formErrors';

export interface SchemaFormProps {
  schema: RJSFSchema;
  /** Prefix of the fields' ids, unique on the page. */
  idPrefix: string;
  disabled: boolean;
  /** The server's refusal (BAD_USER_INPUT), shown at the field it names. */
  serverError: string | null;
  onSubmit: (json: string) => void;
  /** The answer as it would be sent, or null while the form does not satisfy the schema. */
  onDraft: (json: string | null) => void;
  /** The person changed something: a refusal of the previous answer no longer applies. */
  onEdit: () => void;
}

const UI: UiSchema = {
  'ui:submitButtonOptions': { submitText: 'Send answer', props: { className: 'btn primary' } },
};

export default function SchemaForm({ schema, idPrefix, disabled, serverError, onSubmit, onDraft, onEdit }: SchemaFormProps) {
  const [formData, setFormData] = useState<unknown>(undefined);
  const extraErrors = useMemo(() => errorTreeFor(serverError), [serverError]);
  return (
    <Form
      className="schema-form"
      schema={schema}
      uiSchema={UI}
      validator={validator}
      formData={formData}
      idPrefix={idPrefix}
      disabled={disabled}
      extraErrors={extraErrors as never}
      showErrorList={false}
      noHtml5Validate
      focusOnFirstError
      onChange={(e) => {
        setFormData(e.formData);
        onEdit();
        onDraft(validator.isValid(schema, e.formData, schema) ? JSON.stringify(e.formData) : null);
      }}
      onSubmit={(e) => onSubmit(JSON.stringify(e.formData ?? null))}
    />
  );
}
