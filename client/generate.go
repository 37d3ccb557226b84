package client

// generated.go holds the types and operations genqlient makes from the server's schema
// and operations.graphql (settings in genqlient.yaml); go.mod pins the tool.
//go:generate go tool genqlient
