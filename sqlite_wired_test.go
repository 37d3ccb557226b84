package main

const sqliteWired = true
