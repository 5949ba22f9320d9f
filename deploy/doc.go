// Package deploy holds no code: its tests check the deployment artefacts
// (deploy/k8s, docker-compose.yml) against the worker they deploy. It is a
// Go module of its own so that the Kubernetes and Compose libraries the
// tests decode with never enter the library's go.mod.
package deploy
