import type { CodegenConfig } from '@graphql-codegen/cli';

// Types for the operations in src/graphql/*.graphql, generated from the server's schema.
// The output under src/gql/ is committed; `npm run codegen` refreshes it.
const config: CodegenConfig = {
  schema: ['../schema.graphqls', 'src/client-schema.graphql'],
  documents: ['src/graphql/**/*.graphql'],
  ignoreNoDocuments: false,
  generates: {
    'src/gql/': {
      preset: 'client',
      presetConfig: {
        fragmentMasking: false,
        gqlTagName: 'gql',
      },
      config: {
        scalars: { Time: 'string' },
        enumsAsTypes: true,
        useTypeImports: true,
        skipTypename: false,
        nonOptionalTypename: false,
        avoidOptionals: false,
        documentMode: 'documentNode',
      },
    },
  },
};

export default config;
