"""screening"""
